package queuelag_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mailvet/mailvet/internal/queuelag"
	"github.com/mailvet/mailvet/internal/testkit/natstest"
)

// lagSeries is the gathered mailvet_queue_lag_seconds series of reg.
func lagSeries(t *testing.T, reg *prometheus.Registry) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "mailvet_queue_lag_seconds" {
			return f.GetMetric()
		}
	}
	t.Fatal("mailvet_queue_lag_seconds not gathered")
	return nil
}

func consumerLabel(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "consumer" {
			return l.GetValue()
		}
	}
	return ""
}

// A message that waited in a real JetStream stream before it was fetched is recorded with at
// least the time it waited.
func TestQueueLagFromRealMessages(t *testing.T) {
	t.Parallel()
	nc, _ := natstest.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LAGTEST", Subjects: []string{"lagtest.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "lagtest.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	const waited = 150 * time.Millisecond
	time.Sleep(waited)
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "lag", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	lag := queuelag.New(reg)
	n := 0
	var m0 jetstream.Msg
	for m := range batch.Messages() {
		lag.Took(queuelag.ConsumerJobs, m)
		m0 = m
		n++
	}
	if n != 1 {
		t.Fatalf("fetched %d messages", n)
	}
	for _, m := range lagSeries(t, reg) {
		h := m.GetHistogram()
		if consumerLabel(m) != "jobs" || h.GetSampleCount() != 1 {
			t.Fatalf("lag series %q: %d samples", consumerLabel(m), h.GetSampleCount())
		}
		if got := time.Duration(h.GetSampleSum() * float64(time.Second)); got < waited || got > 5*time.Second {
			t.Errorf("lag %v, want at least the %v the message waited", got, waited)
		}
	}
	// A second worker of the same process shares the series instead of failing to register.
	queuelag.New(reg).Took(queuelag.ConsumerJobs, m0)
	if got := lagSeries(t, reg)[0].GetHistogram().GetSampleCount(); got != 2 {
		t.Errorf("%d samples after a second QueueLag recorded one, want 2", got)
	}
}
