package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/mailvet/mailvet/internal/fleet"
	"github.com/mailvet/mailvet/internal/mailsim"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
	"github.com/mailvet/mailvet/internal/testkit/wait"
	"github.com/mailvet/mailvet/internal/verdict"
)

// An address whose probe budget ends while every session slot of its mail server is held by
// another worker was never asked: its answer says the server's sessions were all in use
// (mail_server_busy, docs/api.md "Reasons"), not that the server did not answer (timeout), and it
// carries no reply. The server answers the address itself at once.
func TestSlotWaitPastTheBudgetIsMailServerBusy(t *testing.T) {
	url := natstest.URL(t)
	w, err := mailsim.Start(mailsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	srv, err := w.AddServer(mailsim.ServerOptions{Name: "mx.shared.test"})
	if err != nil {
		t.Fatal(err)
	}
	mxs := []mailsim.MX{{Pref: 10, Host: "mx.shared.test"}}
	// The holder's session waits 4 s for its RCPT reply: past both budgets, with the slot.
	w.AddDomain("slow.test", mailsim.Domain{MX: mxs, Users: []string{"ann"}, RcptDelay: 4 * time.Second})
	w.AddDomain("fast.test", mailsim.Domain{MX: mxs, Users: []string{"bob"}})

	holder, waiter := join(t, url, w, 1, fleet.Options{}), join(t, url, w, 1, fleet.Options{})
	held := make(chan verdict.Result, 1)
	go func() { held <- holder.v.Verify(context.Background(), "ann@slow.test") }()
	wait.For(t, 5*time.Second, "the holder takes the only slot", func() bool { return holder.fl.Slots.Held() == 1 })

	r := waiter.v.Verify(context.Background(), "bob@fast.test")
	if r.Status != verdict.StatusUnknown || r.Reason != verdict.ReasonMailServerBusy {
		t.Errorf("waiting for the slot past the budget: %s (%s), want unknown (mail_server_busy)", r.Status, r.Reason)
	}
	if r.SMTPReply != nil {
		t.Errorf("smtp_reply %+v, want null: the address was not asked", *r.SMTPReply)
	}
	if peak := srv.Stats().PeakConcurrent; peak > 1 {
		t.Errorf("peak %d sessions over the cap of 1", peak)
	}
	<-held
}
