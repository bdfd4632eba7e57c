#!/usr/bin/env bash
# release-check: what `make release` put in dist/ installs the way docs/clients.md ("Installing")
# tells a self-hosting customer, with nothing published and no registry asked:
#   - the npm tarball installs into a scratch project (npm --offline: it has no dependencies) and
#     its entry point imports there;
#   - SHA256SUMS matches every file;
#   - the linux CLI of this machine's architecture runs `--version` and names the version;
#   - the Go client builds in a scratch module that requires github.com/mailvet/mailvet through a
#     replace of this clone (GOPROXY=off: the name is not published).
# `make release-check` runs `make release` first; `make test` runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' client/client.go)
npm_version=$(node -p 'require("./clients/typescript/package.json").version')
if [ "$version" != "$npm_version" ]; then
	echo "release-check: client.Version $version and clients/typescript/package.json $npm_version differ" >&2
	exit 1
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

tgz="$root/dist/mailvet-client-$version.tgz"
[ -f "$tgz" ] || { echo "release-check: $tgz is missing" >&2; exit 1; }
mkdir "$scratch/npm"
printf '{"name":"scratch","private":true,"type":"module"}\n' >"$scratch/npm/package.json"
(cd "$scratch/npm" && npm install --silent --no-audit --no-fund --offline "$tgz" &&
	node --input-type=module -e '
import { Mailvet, MailvetError, apiVersion } from "@mailvet/client";
const pkg = (await import("@mailvet/client/package.json", { with: { type: "json" } })).default;
if (typeof Mailvet !== "function" || typeof MailvetError !== "function" || pkg.version !== process.argv[1]) process.exit(1);
console.log(`release-check: npm install ${process.argv[2]}: @mailvet/client ${pkg.version} imports (API ${apiVersion})`);
' "$version" "$(basename "$tgz")")

(cd dist && sha256sum --quiet -c SHA256SUMS)
for p in linux-amd64 linux-arm64 darwin-amd64 darwin-arm64; do
	[ -x "dist/mailvet-$version-$p" ] || { echo "release-check: dist/mailvet-$version-$p is missing" >&2; exit 1; }
done
echo "release-check: SHA256SUMS matches the $(wc -l <dist/SHA256SUMS) files"

arch=$(go env GOARCH)
out=$("dist/mailvet-$version-linux-$arch" --version)
if [ "$out" != "mailvet $version" ]; then
	echo "release-check: dist/mailvet-$version-linux-$arch --version printed \"$out\", want \"mailvet $version\"" >&2
	exit 1
fi
echo "release-check: dist/mailvet-$version-linux-$arch --version: $out"

# The Go client from a clone, as docs/clients.md says: require + replace, nothing fetched for it.
mkdir "$scratch/go"
cat >"$scratch/go/main.go" <<'GO'
package main

import (
	"fmt"

	"github.com/mailvet/mailvet/client"
)

func main() { fmt.Println("mailvet client", client.Version) }
GO
(
	cd "$scratch/go"
	export GOFLAGS=-mod=mod GOPROXY=off GOWORK=off
	go mod init example.com/scratch >/dev/null 2>&1
	go mod edit -require=github.com/mailvet/mailvet@v0.0.0 -replace=github.com/mailvet/mailvet="$root"
	# The clone's go.sum holds the sums of the modules its go.mod names: with it nothing is asked
	# of the checksum database, which a machine without the internet cannot reach.
	cp "$root/go.sum" go.sum
	go mod tidy >/dev/null
	got=$(go run .)
	[ "$got" = "mailvet client $version" ] || { echo "release-check: the Go client printed \"$got\"" >&2; exit 1; }
	echo "release-check: go build with replace github.com/mailvet/mailvet => a clone: $got"
)
