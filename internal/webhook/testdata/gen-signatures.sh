#!/bin/sh
# Regenerates signatures.json with OpenSSL, independently of the Go code under test:
#   sh internal/webhook/testdata/gen-signatures.sh > internal/webhook/testdata/signatures.json
# Each vector is HMAC-SHA256 over the exact body bytes (printf '%s', no trailing newline).
set -eu
first=1
echo '['
vec() {
	secret=$1 body=$2
	sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$secret" | sed 's/^.*= //')
	[ $first = 1 ] || echo ','
	first=0
	# Bodies and secrets below contain no characters that need JSON escaping beyond '"', which
	# python's json module handles.
	python3 -c 'import json,sys; print(json.dumps({"secret": sys.argv[1], "body": sys.argv[2], "signature": "sha256=" + sys.argv[3]}), end="")' "$secret" "$body" "$sig"
}
vec 'key' 'Hi There'
vec 'whsec_12345678' '{"email":"a@example.com","valid":true,"status":"deliverable","job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11"}'
vec 'whsec_12345678' '{"email":"a@example.com","valid":true,"status":"deliverable","job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11"} '
vec 'another secret with spaces' ''
vec 'ünïcödé-sécret' '{"email":"jürgen@bücher.example","status":"unknown","valid":false,"error":"internal"}'
vec '12345678' '{"a":1,"b":[1,2,3],"c":{"d":null}}'
echo
echo ']'
