package queue

// Layout is one deployment's place on a NATS cluster: the prefix that namespaces every stream,
// consumer, subject and key-value bucket it uses, and how many copies its streams keep.
//
// Why a prefix: two deployments on one cluster (staging and production, or a test run next to a
// live system) would otherwise share the streams VERIFY, JOBS, WEBHOOKS and LISTS and join each
// other's consumers, so one deployment's workers would take the other's work. With prefix
// "staging" the streams are staging_VERIFY…, the consumers staging_verifiers…, and the subjects
// staging.verify.sync, staging.jobs.verify… (docs/architecture.md, "NATS layout"). The empty
// prefix is the layout of a deployment that has the cluster, or its NATS account, to itself.
// internal/config checks MAILVET_NATS_PREFIX: one subject token that is also a valid stream,
// consumer and bucket name.
//
// Every name is built here from the base names in queue.go, consumers.go and messages.go, and
// nowhere else: a caller passes the base name and the Layout it was given at start-up.
type Layout struct {
	Prefix   string
	Replicas int // copies of every stream and bucket (MAILVET_STREAM_REPLICAS); below 1 means 1
}

// Subject is the subject (or subject prefix, or wildcard) base in this layout.
func (l Layout) Subject(base string) string {
	if l.Prefix == "" {
		return base
	}
	return l.Prefix + "." + base
}

// Name is the stream, consumer or bucket name base in this layout.
func (l Layout) Name(base string) string {
	if l.Prefix == "" {
		return base
	}
	return l.Prefix + "_" + base
}

func (l Layout) replicas() int { return max(1, l.Replicas) }
