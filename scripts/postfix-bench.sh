#!/usr/bin/env bash
# Runs TestPostfixVerdicts (internal/verify/postfix_test.go: Mailvet's verdicts on a real Postfix's
# replies) and BenchmarkOraclePostfix (internal/verify/bench_postfix_test.go: Mailvet's engine and
# the oracle clients against a real Postfix with its stock limits), on loopback. It installs Debian's
# postfix package when missing (as root), runs a private instance from a scratch directory (the
# system's own Postfix is neither configured nor started), and stops it afterwards.
# BENCHMARKS.md, "Against a real Postfix", has the results and the command.
set -euo pipefail
cd "$(dirname "$0")/.."

ADDR=127.0.0.253
PORT=2525
COUNT=${COUNT:-3}
DIR=$(mktemp -d /tmp/mailvet-postfix.XXXXXX)
chmod 755 "$DIR" # Postfix's own processes run as the postfix user

if ! command -v postfix >/dev/null; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "postfix-bench: needs Postfix (Debian: apt-get install postfix), or root on Debian to install it" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postfix >/dev/null
fi
if [ "$(id -u)" != 0 ]; then
	echo "postfix-bench: a Postfix instance has to be started as root" >&2
	exit 1
fi

conf=$DIR/conf
mkdir -p "$conf" "$DIR/queue" "$DIR/data" "$DIR/mail"
chown postfix "$DIR/data"
domains=""
: >"$conf/vmailbox"
for d in $(seq -w 0 19); do
	domains="$domains oracle$d.test"
	for u in $(seq -w 0 2 48); do # the even users exist, as in BenchmarkOracle's world
		echo "user$u@oracle$d.test oracle$d.test/user$u/" >>"$conf/vmailbox"
	done
done

# Replies of Postfix's own access tables, for TestPostfixVerdicts: one recipient per action, and
# one client address (127.0.0.252; the benchmark's is 127.0.0.254) refused as a host.
cat >"$conf/rcpt_access" <<MAP
full00@oracle00.test 452 4.2.2 Mailbox full
gone00@oracle00.test 550 5.2.1 Mailbox disabled
deny00@oracle00.test REJECT
later00@oracle00.test DEFER
MAP
echo "127.0.0.252 REJECT" >"$conf/client_access"

# Postfix's stock limits (smtpd_soft_error_limit 10, smtpd_hard_error_limit 20,
# smtpd_client_connection_count_limit 50, smtpd_error_sleep_time 1s) are left as they are; the
# only change is that the benchmark's client address is not exempt from them, as a loopback
# client would be through mynetworks.
cat >"$conf/main.cf" <<CF
compatibility_level = 3.6
queue_directory = $DIR/queue
data_directory = $DIR/data
mail_owner = postfix
setgid_group = postdrop
myhostname = mx.postfix.test
mydestination =
alias_maps =
alias_database =
inet_interfaces = loopback-only
inet_protocols = ipv4
mynetworks = 127.0.0.1/32
smtpd_client_event_limit_exceptions =
smtpd_banner = \$myhostname ESMTP
smtpd_client_restrictions = check_client_access texthash:$conf/client_access
smtpd_recipient_restrictions = check_recipient_access texthash:$conf/rcpt_access
virtual_mailbox_domains =$domains
virtual_mailbox_maps = texthash:$conf/vmailbox
virtual_mailbox_base = $DIR/mail
virtual_uid_maps = static:5000
virtual_gid_maps = static:5000
maillog_file_prefixes = $DIR
maillog_file = $DIR/maillog
CF
# Debian's master.cf, with smtpd on the benchmark's address and port and no chroot (the scratch
# queue has no chroot tree).
sed -e "s/^smtp      inet  n       -       y /$ADDR:$PORT      inet  n       -       n /" \
	-e 's/^\([a-z]*  *unix\(-dgram\)\?  *[-n]  *[-n]  *\)y /\1n /' /etc/postfix/master.cf >"$conf/master.cf"
grep -q "^alternate_config_directories.*$conf" /etc/postfix/main.cf 2>/dev/null ||
	postconf -e "alternate_config_directories = $conf"

stop() {
	postfix -c "$conf" stop >/dev/null 2>&1 || true
	postconf -X alternate_config_directories || true
	echo "postfix-bench: Postfix's log is $DIR/maillog"
}
trap stop EXIT
postfix -c "$conf" check
postfix -c "$conf" start
for _ in $(seq 50); do
	(exec 3<>/dev/tcp/$ADDR/$PORT) 2>/dev/null && break
	sleep 0.1
done

export MAILVET_BENCH_POSTFIX=$ADDR:$PORT MAILVET_BENCH_POSTFIX_LOG=$DIR/maillog
go test -count 1 -run TestPostfixVerdicts -v ./internal/verify/ | grep -v '^=== '
go test -run '^$' -bench OraclePostfix -benchtime 1x -count "$COUNT" ./internal/verify/
