// Package freeport hands tests a loopback address to listen on, for a listener whose address a
// test must know before the code under test binds it.
package freeport

import (
	"net"
	"testing"
)

// Addr is a loopback address with a port the kernel just handed out (and took back).
func Addr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
