// export.js turns the pinned npm packages under data/node_modules into plain JSON lists in
// data/build/, which the Go generators (`go run ./internal/verify/disposable/gen` and
// `go run ./internal/verify/signals/gen`) read. Each list is taken through the package's own
// public entry point, so that a package that changes its file layout breaks here, loudly,
// rather than silently yielding an empty list. `make data` runs it after `npm ci`.
'use strict';

const fs = require('fs');
const path = require('path');

const out = path.join(__dirname, 'build');
fs.mkdirSync(out, { recursive: true });

function write(name, list) {
  if (!Array.isArray(list) || list.length === 0) {
    throw new Error(`${name}: expected a non-empty list`);
  }
  fs.writeFileSync(path.join(out, name + '.json'), JSON.stringify(list));
  console.log(`data/build/${name}.json: ${list.length} entries`);
}

function lines(file) {
  return fs.readFileSync(require.resolve(file), 'utf8').split('\n').map((s) => s.trim()).filter(Boolean);
}

write('disposable-domains', require('disposable-domains'));
write('mailchecker', Array.from(require('mailchecker/platform/node').blacklist()));
write('role-based-email-addresses', require('role-based-email-addresses'));
write('freemail-free', lines('freemail/data/free.txt'));
write('email-providers-common', require('email-providers/common.json'));
// Ranked, most common first; the package ships it compressed and its entry point unpacks it.
write('common-passwords', require('@zxcvbn-ts/language-common').dictionary['passwords-common']);

// The lockfile is committed; it must not carry download addresses, only names, versions and
// integrity hashes. npm ci resolves each package against whatever registry is configured.
const lockPath = path.join(__dirname, 'package-lock.json');
const lock = JSON.parse(fs.readFileSync(lockPath, 'utf8'));
let stripped = 0;
for (const pkg of Object.values(lock.packages || {})) {
  if (pkg.resolved) {
    delete pkg.resolved;
    stripped++;
  }
}
if (stripped > 0) {
  fs.writeFileSync(lockPath, JSON.stringify(lock, null, 2) + '\n');
  console.log(`data/package-lock.json: removed ${stripped} resolved fields`);
}
