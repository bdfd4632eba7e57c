// Command mailvet is Mailvet's command-line client: it verifies addresses and CSV lists through
// the API, manages keys and usage, and exports or deletes the account's data and reads its audit
// log (docs/clients.md, "CLI"). The logic is in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/mailvet/mailvet/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
