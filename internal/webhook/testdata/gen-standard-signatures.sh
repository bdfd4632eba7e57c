#!/bin/sh
# Regenerates standard-signatures.json with OpenSSL, independently of the Go and TypeScript code
# under test:
#   sh internal/webhook/testdata/gen-standard-signatures.sh > internal/webhook/testdata/standard-signatures.json
# Each vector is the webhook-signature of Standard Webhooks: "v1," and the base64 of HMAC-SHA256
# over "<id>.<timestamp>.<body>" (printf '%s', no trailing newline). The key is the secret's
# UTF-8 bytes, except for a secret "whsec_<standard base64>", whose key is the decoded bytes
# (docs/api.md, "Signature"). The key goes to OpenSSL as hex, so binary keys pass unchanged.
set -eu
first=1
echo '['
vec() {
	secret=$1 id=$2 ts=$3 body=$4
	hexkey=$(python3 -c '
import base64, binascii, sys
s = sys.argv[1]
key = s.encode()
if s.startswith("whsec_"):
    try:
        b = base64.b64decode(s[6:], validate=True)
        if b:
            key = b
    except binascii.Error:
        pass
print(key.hex())' "$secret")
	sig=$(printf '%s.%s.%s' "$id" "$ts" "$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$hexkey" -binary | openssl base64 -A)
	[ $first = 1 ] || echo ','
	first=0
	python3 -c 'import json,sys; print(json.dumps({"secret": sys.argv[1], "id": sys.argv[2], "timestamp": sys.argv[3], "body": sys.argv[4], "signature": "v1," + sys.argv[5]}), end="")' "$secret" "$id" "$ts" "$body" "$sig"
}
# A Standard Webhooks style secret: the key is the 24 decoded bytes.
vec 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' 'msg_p5jXN8AQM9LWM0D4loKWxJek' '1614265330' '{"test": 2432232314}'
# A Mailvet delivery: its id is the delivery's uuid; a raw secret is keyed with its own bytes.
vec 'whsec_12345678' '0190f5a2-7c1e-7b3a-9d4e-5f6a7b8c9d0e' '1767225600' '{"email":"a@example.com","valid":true,"status":"deliverable","job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11"}'
vec 'at-least-8-chars' '0190f5a2-7c1e-7b3a-9d4e-5f6a7b8c9d0e' '1767225600' '{"email":"a@example.com","valid":true,"status":"deliverable","job_id":"0b8f5a3c-7f3e-4f53-9a53-0c1a4f0f2f11"}'
# "whsec_" followed by what is not base64: the whole secret's bytes are the key.
vec 'whsec_not base64!' '0190f5a2-7c1e-7b3a-9d4e-5f6a7b8c9d0e' '1767225601' ''
vec 'ünïcödé-sécret' '0190f5a2-7c1e-7b3a-9d4e-5f6a7b8c9d0f' '1767225602' '{"email":"jürgen@bücher.example","status":"unknown","valid":false,"error":"internal"}'
echo
echo ']'
