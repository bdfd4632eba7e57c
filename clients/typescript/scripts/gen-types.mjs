#!/usr/bin/env node
// Generates src/openapi.ts, the TypeScript types of the API, from internal/api/openapi.json (the
// API contract the Go tests check every real response against; docs/api.md describes it).
//
//   node clients/typescript/scripts/gen-types.mjs        (from the repository root, or `npm run gen` here)
//
// Every schema in components.schemas becomes an exported type of the same name, and every
// operation with an operationId gets <OperationId>Request (its JSON request body) and
// <OperationId>Response (its 2xx JSON bodies). The conversion is generic JSON Schema → TypeScript,
// so new routes and schemas need no change here: regenerate and commit. test/openapi.test.mjs
// regenerates in memory and fails when the committed file differs.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const specPath = resolve(here, "../../../internal/api/openapi.json");
export const outputPath = resolve(here, "../src/openapi.ts");
export const regenerateCommand = "node clients/typescript/scripts/gen-types.mjs";

// Names of JavaScript globals a schema must not shadow in code that imports its type (a schema
// called "Error" would hide the global Error class): such a schema is exported as Api<Name>.
const reserved = new Set(["Error", "Object", "Array", "String", "Number", "Boolean", "Date", "Map", "Set",
  "Promise", "Record", "Response", "Request", "Headers", "URL", "Symbol", "Function", "JSON"]);

/** typeName is the exported TypeScript name of the schema called name in components.schemas. */
export function typeName(name) {
  let id = String(name).replace(/[^A-Za-z0-9_$]+(.)?/g, (_, c) => (c ? c.toUpperCase() : ""));
  if (!/^[A-Za-z_$]/.test(id)) id = "_" + id;
  id = id[0].toUpperCase() + id.slice(1);
  return reserved.has(id) ? "Api" + id : id;
}

function pascal(s) {
  return typeName(s);
}

function refName(ref) {
  const m = /^#\/components\/schemas\/(.+)$/.exec(ref);
  if (!m) throw new Error(`unsupported $ref ${ref}: only #/components/schemas/… is generated`);
  return typeName(m[1].replace(/~1/g, "/").replace(/~0/g, "~"));
}

function literal(v) {
  if (v === null) return "null";
  if (typeof v === "object") return "unknown";
  return JSON.stringify(v);
}

function propKey(k) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k) ? k : JSON.stringify(k);
}

function doc(schema, pad) {
  const text = typeof schema === "object" && schema && typeof schema.description === "string" ? schema.description.trim() : "";
  if (!text) return "";
  const lines = text.replace(/\*\//g, "*\\/").split("\n");
  if (lines.length === 1) return `${pad}/** ${lines[0]} */\n`;
  return `${pad}/**\n${lines.map((l) => `${pad} * ${l}`.trimEnd()).join("\n")}\n${pad} */\n`;
}

function union(parts) {
  const uniq = [...new Set(parts)];
  if (uniq.includes("unknown")) return "unknown";
  return uniq.length === 0 ? "never" : uniq.join(" | ");
}

function paren(t) {
  return /[|&]/.test(t) && !/^\{[\s\S]*\}$/.test(t) ? `(${t})` : t;
}

/** tsType converts one JSON Schema (OpenAPI 3.1) to a TypeScript type expression. */
export function tsType(schema, indent = "") {
  if (schema === true || schema === undefined || schema === null) return "unknown";
  if (schema === false) return "never";
  if (schema.$ref) return refName(schema.$ref);
  if ("const" in schema) return literal(schema.const);
  if (Array.isArray(schema.enum)) return union(schema.enum.map(literal));
  if (Array.isArray(schema.allOf)) {
    const own = { ...schema };
    delete own.allOf;
    delete own.description;
    const parts = schema.allOf.map((s) => paren(tsType(s, indent)));
    if (own.type || own.properties) parts.push(paren(tsType(own, indent)));
    return parts.join(" & ");
  }
  for (const key of ["anyOf", "oneOf"]) {
    if (Array.isArray(schema[key])) return union(schema[key].map((s) => paren(tsType(s, indent))));
  }
  let types = schema.type;
  if (types === undefined) {
    if (schema.properties || schema.additionalProperties !== undefined) types = "object";
    else if (schema.items) types = "array";
    else return "unknown";
  }
  if (Array.isArray(types)) return union(types.map((t) => paren(tsType({ ...schema, type: t }, indent))));
  switch (types) {
    case "string":
      return "string";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "boolean";
    case "null":
      return "null";
    case "array":
      return `Array<${tsType(schema.items, indent)}>`;
    case "object":
      return objectType(schema, indent);
    default:
      return "unknown";
  }
}

function objectType(schema, indent) {
  const props = schema.properties || {};
  const names = Object.keys(props);
  const extra = schema.additionalProperties;
  if (names.length === 0) {
    if (extra === false) return "Record<string, never>";
    return `Record<string, ${extra && extra !== true ? tsType(extra, indent) : "unknown"}>`;
  }
  const required = new Set(schema.required || []);
  const inner = indent + "  ";
  let out = "{\n";
  for (const name of names) {
    out += doc(props[name], inner);
    out += `${inner}${propKey(name)}${required.has(name) ? "" : "?"}: ${tsType(props[name], inner)};\n`;
  }
  // Without "additionalProperties": false, JSON Schema allows other fields (the error envelope
  // adds limit, reset_at, … per code), so the type must too.
  if (extra !== false) out += `${inner}[key: string]: unknown;\n`;
  return out + indent + "}";
}

function jsonSchemaOf(content) {
  if (!content) return undefined;
  for (const [type, media] of Object.entries(content)) {
    if (/json/.test(type) && !/ndjson/.test(type) && media && media.schema) return media.schema;
  }
  return undefined;
}

function resolveResponse(spec, r) {
  if (r && r.$ref) {
    const m = /^#\/components\/responses\/(.+)$/.exec(r.$ref);
    return m ? spec.components?.responses?.[m[1]] : undefined;
  }
  return r;
}

/** generate returns the text of src/openapi.ts for the parsed OpenAPI document spec. */
export function generate(spec) {
  let out = "";
  out += "// Code generated by scripts/gen-types.mjs from internal/api/openapi.json. DO NOT EDIT.\n";
  out += `// Regenerate with \`${regenerateCommand}\` (from the repository root) after changing the API.\n\n`;
  out += `/** The version of internal/api/openapi.json these types were generated from. */\n`;
  out += `export const apiVersion = ${JSON.stringify(spec.info?.version ?? "")};\n`;

  const schemas = spec.components?.schemas ?? {};
  const seen = new Map();
  for (const name of Object.keys(schemas)) {
    const id = typeName(name);
    if (seen.has(id)) throw new Error(`schemas ${seen.get(id)} and ${name} both map to the type ${id}`);
    seen.set(id, name);
    out += "\n" + doc(schemas[name], "") + `export type ${id} = ${tsType(schemas[name])};\n`;
  }

  const methods = ["get", "put", "post", "delete", "patch", "head", "options"];
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const method of methods) {
      const op = item?.[method];
      if (!op || !op.operationId) continue;
      const base = pascal(op.operationId);
      const where = `${method.toUpperCase()} ${path}`;
      const body = op.requestBody && jsonSchemaOf(op.requestBody.content);
      if (body) {
        for (const id of [base + "Request"]) {
          if (seen.has(id)) throw new Error(`${where}: ${id} is also a schema name`);
          seen.set(id, where);
        }
        out += `\n/** The JSON request body of ${where}. */\nexport type ${base}Request = ${tsType(body)};\n`;
      }
      const ok = Object.entries(op.responses ?? {})
        .filter(([code]) => /^2/.test(code))
        .map(([, r]) => jsonSchemaOf(resolveResponse(spec, r)?.content))
        .filter(Boolean);
      if (ok.length) {
        const id = base + "Response";
        if (seen.has(id)) throw new Error(`${where}: ${id} is also a schema name`);
        seen.set(id, where);
        out += `\n/** The JSON body of a 2xx answer to ${where}. */\nexport type ${id} = ${union(ok.map((s) => paren(tsType(s))))};\n`;
      }
    }
  }
  return out;
}

/** generateFromFile reads the OpenAPI document at path and returns the generated text. */
export function generateFromFile(path = specPath) {
  return generate(JSON.parse(readFileSync(path, "utf8")));
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  writeFileSync(outputPath, generateFromFile());
  console.log(`wrote ${join("clients/typescript/src", "openapi.ts")} from internal/api/openapi.json`);
}
