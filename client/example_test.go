package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/mailvet/mailvet/client"
)

// These examples need a running server (`make demo`), so they compile as documentation and are
// not run; e2e_test.go runs the same calls against the real binary.

func ExampleNew() {
	c := client.New(os.Getenv("MAILVET_API_KEY"),
		client.WithBaseURL("http://localhost:8080"),
		client.WithRetryOnRateLimit(true), // wait for the next window instead of failing
		client.WithTimeout(30*time.Second),
	)
	_ = c
}

func ExampleClient_Verify() {
	c := client.New(os.Getenv("MAILVET_API_KEY"))
	r, err := c.Verify(context.Background(), "ann@acme.example")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.Reason, r.Confidence) // deliverable accepted 0.95
}

func ExampleClient_VerifyBatch() {
	c := client.New(os.Getenv("MAILVET_API_KEY"), client.WithRetryOnRateLimit(true))
	emails := []string{"ann@acme.example", "zoe@acme.example", "ann@mial.example"}
	results, err := c.VerifyBatch(context.Background(), emails) // any length, in input order
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r.Email, r.Status, r.Suggestion)
	}
}

func ExampleClient_VerifyStream() {
	c := client.New(os.Getenv("MAILVET_API_KEY"), client.WithRetryOnRateLimit(true))
	emails := []string{"ann@acme.example", "anyone@globex.example"}
	for r, err := range c.VerifyStream(context.Background(), emails) { // as the lines arrive
		var apiErr *client.Error
		if errors.As(err, &apiErr) && len(apiErr.Emails) > 0 {
			log.Printf("not verified (and not charged), send again: %v", apiErr.Emails)
			break
		}
		var cut *client.StreamCutError
		if errors.As(err, &cut) {
			log.Printf("the stream was cut (%v); no result for inputs %v, send again: %v", cut.Err, cut.Indexes, cut.Emails)
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(emails[r.Index], r.Email, r.Status) // the input it answers, in completion order
	}
}

func ExampleClient_VerifyAsync() {
	c := client.New(os.Getenv("MAILVET_API_KEY"))
	ctx := context.Background()
	acc, err := c.VerifyAsync(ctx, "ann@acme.example", client.AsyncOptions{
		WebhookURL:    "https://hooks.example.com/mailvet",
		WebhookSecret: os.Getenv("WEBHOOK_SECRET"), // verify deliveries with webhook.Verify
	})
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Job(ctx, acc.JobID) // or wait for the callback
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status)
}

func ExampleError() {
	c := client.New(os.Getenv("MAILVET_API_KEY"))
	_, err := c.Verify(context.Background(), "ann@acme.example")
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		switch apiErr.Code {
		case client.CodeRateLimitExceeded:
			fmt.Println("limit", apiErr.Limit, "per minute; try again at", apiErr.ResetAt)
		case client.CodeMonthlyQuotaExceeded:
			fmt.Println("quota used:", apiErr.Used, "of", apiErr.Limit)
		default:
			fmt.Println(apiErr.Status, apiErr.Code, apiErr.Action)
		}
	}
}

func ExampleClient_CreateKey() {
	m := client.New(os.Getenv("MAILVET_PROVISIONING_KEY")) // sk_mgmt_…
	k, err := m.CreateKey(context.Background(), "production")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(k.ID, k.Key) // the full key is shown only this once
}

// A file of any size goes through a bulk list: it is streamed up, verified on the fleet, and its
// rows come back in input order with the result's columns appended (docs/lists.md).
func ExampleClient_UploadList() {
	c := client.New(os.Getenv("MAILVET_API_KEY"))
	ctx := context.Background()
	f, err := os.Open("customers.csv")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	l, err := c.UploadList(ctx, f, client.ListUpload{Name: "june"})
	if err != nil {
		log.Fatal(err)
	}
	l, err = c.WaitList(ctx, l.ID, time.Second, func(p client.List) { log.Printf("%d of %d", p.Verified, p.Unique) })
	if err != nil || l.State != client.ListCompleted {
		log.Fatal(l.State, l.Error, err)
	}
	rc, err := c.ListResults(ctx, l.ID, client.ResultsOptions{Format: client.ListCSV})
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	_, _ = io.Copy(os.Stdout, rc)
}

// Result marshals like the API's JSON: empty optional strings are null.
func ExampleResult() {
	out, _ := client.Result{Email: "ann@mial.example", Status: client.StatusInvalid, FailedCheck: "no_mx",
		Suggestion: "mail.example", Reason: "no_mx"}.MarshalJSON()
	fmt.Println(string(out))
	// Output:
	// {"email":"ann@mial.example","valid":false,"status":"invalid","confidence":0,"failed_check":"no_mx","disposable":false,"role":false,"free_provider":false,"catch_all":false,"smtp_blocked":false,"mx_found":false,"mx_host":null,"suggestion":"mail.example","latency_ms":0,"reason":"no_mx","smtp_reply":null}
}
