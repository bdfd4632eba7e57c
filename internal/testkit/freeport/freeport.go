// Package freeport hands tests a loopback address to listen on, for a listener whose address a
// test must know before the code under test binds it.
//
// The port comes from below the kernel's ephemeral range: a port the kernel handed out for
// "127.0.0.1:0" can be handed out again at once, as the source port of any outgoing connection
// (a pgx or NATS dial in a parallel test), and the code under test then fails to bind it. Ports
// below the range are only ever taken by explicit binds, so the only race left is between two
// callers of this package drawing the same random port.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Addr is a loopback address with a free port outside the kernel's ephemeral range.
func Addr(t testing.TB) string {
	t.Helper()
	low, high := 10000, ephemeralLow()
	for range 200 {
		port := low + rand.IntN(high-low)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	t.Fatal("freeport: no free loopback port below the ephemeral range after 200 tries")
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default when the
// setting cannot be read).
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 10001 {
		return fallback
	}
	return n
}
