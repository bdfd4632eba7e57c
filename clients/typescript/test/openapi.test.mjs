// src/openapi.ts must be what scripts/gen-types.mjs makes of internal/api/openapi.json today, so
// a change to the API contract that is not regenerated fails here (and the client's types never
// drift from the API the Go tests check).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { generate, generateFromFile, outputPath, regenerateCommand, specPath, typeName } from "../scripts/gen-types.mjs";

test("src/openapi.ts is up to date with internal/api/openapi.json", () => {
  const want = generateFromFile(specPath);
  const have = readFileSync(outputPath, "utf8");
  if (have !== want) {
    assert.fail(`clients/typescript/src/openapi.ts is out of date with internal/api/openapi.json.\n` +
      `Regenerate it from the repository root with:\n\n    ${regenerateCommand}\n\nthen commit src/openapi.ts.`);
  }
});

test("every schema and every operation of the API has its type", () => {
  const spec = JSON.parse(readFileSync(specPath, "utf8"));
  const have = readFileSync(outputPath, "utf8");
  for (const name of Object.keys(spec.components.schemas)) {
    assert.match(have, new RegExp(`^export type ${typeName(name)} = `, "m"), name);
  }
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const ok = Object.entries(op.responses ?? {}).some(([code, r]) => /^2/.test(code) && JSON.stringify(r).includes("application/json"));
      if (op.operationId && ok) assert.match(have, new RegExp(`^export type ${typeName(op.operationId)}Response = `, "m"), `${method} ${path}`);
    }
  }
});

// A schema the API does not have (yet): the generator handles any JSON Schema it meets, and the
// result compiles and means what the schema says.
const sample = {
  info: { version: "9.9.9" },
  components: {
    schemas: {
      "list-summary": {
        type: "object",
        description: "A bulk list.",
        additionalProperties: false,
        required: ["id", "state", "counts"],
        properties: {
          id: { type: "string", format: "uuid" },
          state: { type: "string", enum: ["queued", "running", "done"] },
          counts: { type: "object", additionalProperties: { type: "integer" } },
          "file-name": { type: ["string", "null"] },
          tags: { type: "array", items: { type: "string" } },
          owner: { anyOf: [{ $ref: "#/components/schemas/Owner" }, { type: "null" }] },
        },
      },
      Owner: { type: "object", required: ["name"], properties: { name: { type: "string" } } },
      Error: { type: "object", required: ["error"], properties: { error: { type: "string" } } },
      ListError: { allOf: [{ $ref: "#/components/schemas/Error" }, { type: "object", required: ["list_id"], properties: { error: { const: "list_failed" }, list_id: { type: "string" } } }] },
      Anything: {},
    },
  },
  paths: {
    "/v1/email/lists": {
      post: {
        operationId: "createList",
        requestBody: { content: { "application/json": { schema: { type: "object", required: ["emails"], properties: { emails: { type: "array", items: { type: "string" } } } } } } },
        responses: { "201": { content: { "application/json": { schema: { $ref: "#/components/schemas/list-summary" } } } }, "400": { description: "bad" } },
      },
    },
  },
};

test("the generator turns any schema into a type that compiles and means what it says", () => {
  const src = generate(sample);
  assert.match(src, /export type ListSummary = \{/);
  assert.match(src, /state: "queued" \| "running" \| "done";/);
  assert.match(src, /"file-name"\?: string \| null;/);
  assert.match(src, /counts: Record<string, number>;/);
  assert.match(src, /export type ApiError = /, "a schema named like a global gets the Api prefix");
  assert.match(src, /export type ListError = ApiError & /);
  assert.match(src, /export type Anything = unknown;/);
  assert.match(src, /export type CreateListRequest = /);
  assert.match(src, /export type CreateListResponse = ListSummary;/);
  const dir = mkdtempSync(join(tmpdir(), "mailvet-gen-"));
  try {
    writeFileSync(join(dir, "openapi.ts"), src);
    writeFileSync(join(dir, "use.ts"), [
      'import type { ListSummary, ListError, CreateListRequest } from "./openapi.js";',
      'const ok: ListSummary = { id: "x", state: "done", counts: { deliverable: 3 }, "file-name": null, owner: { name: "ann" } };',
      '// @ts-expect-error: "paused" is not a state of the enum',
      'const badState: ListSummary = { id: "x", state: "paused", counts: {} };',
      '// @ts-expect-error: additionalProperties false forbids unknown fields',
      'const extra: ListSummary = { id: "x", state: "done", counts: {}, surprise: 1 };',
      'const err: ListError = { error: "list_failed", list_id: "l1" };',
      'const req: CreateListRequest = { emails: ["a@b.example"] };',
      "export { ok, badState, extra, err, req };",
    ].join("\n"));
    const tsc = new URL("../node_modules/typescript/bin/tsc", import.meta.url).pathname;
    execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", join(dir, "use.ts")], { stdio: "pipe" });
  } catch (err) {
    assert.fail(`the generated sample does not compile:\n${err.stdout ?? ""}${err.stderr ?? ""}${err.stdout ? "" : err}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a $ref outside components.schemas is refused instead of guessed", () => {
  assert.throws(() => generate({ components: { schemas: { A: { $ref: "other.json#/B" } } }, paths: {} }), /unsupported \$ref/);
});
