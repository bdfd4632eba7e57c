// `npm pack` makes a package that installs into a fresh project and works there: the ESM entry
// point imports under plain Node, and its type declarations type-check a TypeScript consumer.
// Needs a build first (`make test-ts` builds); the package has no dependencies, so the install
// needs no registry.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "mailvet-pack-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

test("npm pack produces a package that installs and imports in a scratch ESM project", () => {
  // --ignore-scripts: the prepack build already ran (make test-ts builds before testing).
  const [packed] = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", scratch], pkgDir));
  const files = packed.files.map((f) => f.path).sort();
  for (const f of ["dist/index.js", "dist/index.d.ts", "dist/client.js", "dist/openapi.d.ts", "dist/webhook.js", "README.md", "package.json"]) {
    assert.ok(files.includes(f), `${f} is in the package: ${files.join(", ")}`);
  }
  assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("scripts/") || f.startsWith("node_modules/")), files.join(", "));
  assert.equal(packed.name, "@mailvet/client");

  const app = join(scratch, "app");
  execFileSync("mkdir", ["-p", app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "scratch-app", private: true, type: "module" }));
  npm(["install", "--no-audit", "--no-fund", "--offline", join(scratch, packed.filename)], app);
  const installed = JSON.parse(readFileSync(join(app, "node_modules/@mailvet/client/package.json"), "utf8"));
  assert.equal(installed.version, packed.version);
  assert.deepEqual(installed.dependencies ?? {}, {}, "zero runtime dependencies");

  const v = JSON.parse(readFileSync(new URL("../../../internal/webhook/testdata/signatures.json", import.meta.url), "utf8"))[0];
  writeFileSync(join(app, "main.mjs"), `
import { Mailvet, MailvetError, verifyWebhookSignature, apiVersion, batchChunkSize } from "@mailvet/client";
const mv = new Mailvet({ baseUrl: "http://127.0.0.1:1", apiKey: "sk_live_x" });
const ok = await verifyWebhookSignature(${JSON.stringify(v.body)}, ${JSON.stringify(v.signature)}, ${JSON.stringify(v.secret)});
console.log(JSON.stringify({ verify: typeof mv.verify, stream: typeof mv.verifyStream, error: new MailvetError(400, { error: "invalid_request" }).error, ok, apiVersion, batchChunkSize }));
`);
  const out = JSON.parse(execFileSync(process.execPath, ["main.mjs"], { cwd: app, encoding: "utf8" }));
  assert.deepEqual(out, { verify: "function", stream: "function", error: "invalid_request", ok: true, apiVersion: out.apiVersion, batchChunkSize: 50 });
  assert.match(out.apiVersion, /^\d+\.\d+/);

  // The declarations type-check a consumer: right uses compile, a wrong one is an error.
  writeFileSync(join(app, "use.ts"), `
import { Mailvet, MailvetError, type VerifyResult, type Account } from "@mailvet/client";
const mv = new Mailvet({ baseUrl: "http://localhost:8080", apiKey: "sk_live_x", retryOnRateLimit: true });
export async function run(): Promise<string> {
  const r: VerifyResult = await mv.verify("ann@acme.example");
  const all: VerifyResult[] = await mv.verifyBatch(["a@acme.example"]);
  for await (const s of mv.verifyStream(["a@acme.example"])) console.log(s.status === "deliverable", s.reason, s.index + 1);
  const acct: Account = await mv.account();
  try { await mv.verify("x"); } catch (e) { if (e instanceof MailvetError && e.error === "rate_limit_exceeded") return e.reset_at ?? ""; }
  // @ts-expect-error: status is an enum of the API's statuses
  const wrong: VerifyResult["status"] = "maybe";
  return r.email + all.length + acct.tier + wrong;
}
`);
  const tsc = join(pkgDir, "node_modules/typescript/bin/tsc");
  try {
    execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--target", "es2022", "--lib", "es2022,dom,dom.iterable", "--module", "nodenext", "--moduleResolution", "nodenext", "use.ts"], { cwd: app, encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    assert.fail(`the packed declarations do not type-check a consumer:\n${err.stdout}${err.stderr}`);
  }
});
