package client_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/mailvet/mailvet/client"
)

// A request that fails on the network names its route, never its query: a history deletion's
// query is the address being erased, which has no place in the caller's logs.
func TestNetworkErrorNamesNoAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the connection is refused
	c := client.New("sk_test_x", client.WithBaseURL("http://"+addr))
	_, err = c.DeleteHistory(context.Background(), "ann.private@acme.test")
	if err == nil {
		t.Fatal("a history deletion against a closed port succeeded")
	}
	if msg := err.Error(); strings.Contains(msg, "ann.private") || !strings.Contains(msg, "/v1/email/history") {
		t.Fatalf("error %q: want the route and no address", msg)
	}
}
