// check_k8s.mjs NODE_MODULES DIR: every document of DIR/*.yaml validated by kubernetes-models'
// class for its apiVersion and kind, a broken copy of each workload refused (so the check can
// fail), then the gateway StatefulSet's promises and flashgate --check-config on the ConfigMap's
// file (FG_BIN). Prints "N passed, M failed".
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { spawnSync } from "node:child_process";
import os from "node:os";

const [modules, dir] = process.argv.slice(2);
const { parseAllDocuments } = await import(pathToFileURL(path.join(modules, "yaml/dist/index.js")));
let passed = 0, failed = 0;
const result = (name, ok, detail = "") => {
  if (ok) { passed++; console.log(`ok   ${name}`); } else { failed++; console.log(`FAIL ${name}: ${detail}`); }
};

async function modelClass(apiVersion, kind) {
  const group = apiVersion.includes("/") ? apiVersion : `${apiVersion}`; // "apps/v1" or "v1"
  const mod = await import(pathToFileURL(path.join(modules, "kubernetes-models", group, "index.js")));
  return mod[kind];
}

function validate(Cls, doc) {
  try { new Cls(doc).validate(); return ""; } catch (e) { return String(e.message || e).slice(0, 600); }
}

// Unknown fields: kubernetes-models' validators let them through, so the fields of each object
// are checked against the properties of its type in the package's declarations (.d.ts, made
// from the same OpenAPI definitions), following the type of every nested object and array.
const declCache = new Map();
function parseDecl(file) {
  if (declCache.has(file)) return declCache.get(file);
  const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const imports = new Map();
  for (const m of text.matchAll(/import \{([^}]*)\} from "([^"]+)";/g))
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) imports.set(name, m[2]);
  const head = text.match(/export interface I\w+(?: extends [\w, ]+)? \{/);
  const props = new Map();
  if (head) {
    let i = head.index + head[0].length, depth = 0, start = i;
    const body = [];
    for (; i < text.length; i++) {
      const ch = text[i];
      if (ch === "{" || ch === "<" || ch === "(") depth++;
      else if (ch === ">" && text[i - 1] !== "=") depth--;
      else if (ch === "}" || ch === ")") { if (depth === 0) break; depth--; }
      else if (ch === ";" && depth === 0) { body.push(text.slice(start, i)); start = i + 1; }
    }
    for (const p of body) {
      const m = p.trim().match(/^"([^"]+)"\??:\s*([\s\S]+)$/);
      if (m) props.set(m[1], m[2].replace(/\s+/g, " ").trim());
    }
  }
  const d = { file, imports, props };
  declCache.set(file, d);
  return d;
}
function resolveImport(decl, name) {
  const spec = decl.imports.get(name);
  if (!spec) return null;
  const base = spec.startsWith(".") ? path.resolve(path.dirname(decl.file), spec) : path.join(modules, spec);
  return base.replace(/\.js$/, "") + ".d.ts";
}
function strictCheck(decl, obj, where, out) {
  if (!obj || typeof obj !== "object" || Array.isArray(obj) || decl.props.size === 0) return;
  for (const [k, v] of Object.entries(obj)) {
    const t = decl.props.get(k);
    if (t === undefined) { out.push(`${where}.${k}`); continue; }
    const arr = t.match(/^Array<(\w+)>$/), map = t.match(/^\{ \[key: string\]: (\w+) \}$/), ref = t.match(/^(\w+)$/);
    const name = (arr || map || ref)?.[1];
    const file = name && resolveImport(decl, name);
    if (!file || !fs.existsSync(file)) continue; // a primitive, a union, an IntOrString
    const sub = parseDecl(file);
    if (arr && Array.isArray(v)) v.forEach((x, i) => strictCheck(sub, x, `${where}.${k}[${i}]`, out));
    else if (map && v && typeof v === "object") for (const [mk, mv] of Object.entries(v)) strictCheck(sub, mv, `${where}.${k}.${mk}`, out);
    else if (ref) strictCheck(sub, v, `${where}.${k}`, out);
  }
}
function unknownFields(obj) {
  const file = path.join(modules, "kubernetes-models", obj.apiVersion, `${obj.kind}.d.ts`);
  const out = [];
  strictCheck(parseDecl(file), obj, obj.kind, out);
  return out;
}

const docs = [];
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const d of parseAllDocuments(fs.readFileSync(path.join(dir, f), "utf8"))) {
    if (d.errors.length) { result(`${f}: YAML`, false, d.errors[0].message); continue; }
    const obj = d.toJS();
    if (obj) docs.push([f, obj]);
  }
}
result("manifests found", docs.length >= 8, `${docs.length} documents`);
for (const [f, obj] of docs) {
  const Cls = await modelClass(obj.apiVersion, obj.kind);
  if (!Cls) { result(`${f}: ${obj.kind} ${obj.metadata?.name}`, false, `no schema for ${obj.apiVersion} ${obj.kind}`); continue; }
  const err = validate(Cls, obj);
  result(`${f}: ${obj.apiVersion} ${obj.kind} ${obj.metadata?.name} validates`, !err, err);
  const unknown = unknownFields(obj);
  result(`${f}: ${obj.kind} ${obj.metadata?.name} has no unknown field`, unknown.length === 0, unknown.join(", "));
  if (obj.spec?.template?.spec?.containers) {
    const broken = structuredClone(obj);
    broken.spec.template.spec.containers[0].ports = [{ containerPort: "http" }];
    result(`${f}: ${obj.kind} ${obj.metadata.name} with a string containerPort is refused`, !!validate(Cls, broken));
    const typo = structuredClone(obj);
    typo.spec.template.spec.containers[0].readinesProbe = {};
    result(`${f}: ${obj.kind} ${obj.metadata.name} with a misspelt field is refused`,
      unknownFields(typo).includes(`${obj.kind}.spec.template.spec.containers[0].readinesProbe`));
  }
}

const gw = docs.map(([, o]) => o).find((o) => o.kind === "StatefulSet" && o.metadata.name === "flashgate");
result("the gateway is a StatefulSet", !!gw);
if (gw) {
  const pod = gw.spec.template;
  const c = pod.spec.containers[0];
  for (const p of ["startupProbe", "readinessProbe", "livenessProbe"])
    result(`${p} on /healthz`, c[p]?.httpGet?.path === "/healthz", JSON.stringify(c[p]));
  result("preStop starts the drain", /kill -TERM 1/.test((c.lifecycle?.preStop?.exec?.command || []).join(" ")));
  const mount = (c.volumeMounts || []).find((m) => m.mountPath === "/var/lib/flashgate");
  result("sessions on a persistent volume claim",
    !!mount && (gw.spec.volumeClaimTemplates || []).some((t) => t.metadata.name === mount.name));
  result("memory requested and limited", !!c.resources?.requests?.memory && !!c.resources?.limits?.memory);
  result("Prometheus scrape annotation", pod.metadata.annotations?.["prometheus.io/scrape"] === "true" &&
    pod.metadata.annotations?.["prometheus.io/path"] === "/metrics");
  result("grace period above the drain", pod.spec.terminationGracePeriodSeconds > 30);
}
// the gateway's own config check on the ConfigMap's file, with the Secret's variables
const cm = docs.map(([, o]) => o).find((o) => o.kind === "ConfigMap" && o.data?.["flashgate.json"]);
const secret = docs.map(([, o]) => o).find((o) => o.kind === "Secret" && o.stringData);
const bin = process.env.FG_BIN && path.join(process.env.FG_BIN, "flashgate");
result("a ConfigMap holds flashgate.json", !!cm);
if (cm && bin && fs.existsSync(bin)) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "fg-k8s-"));
  const file = path.join(tmp, "flashgate.json");
  fs.writeFileSync(file, cm.data["flashgate.json"]);
  const env = { ...process.env, ...(secret?.stringData || {}) };
  const r = spawnSync(bin, ["--config", file, "--check-config"], { env, encoding: "utf8" });
  result("flashgate --check-config accepts the ConfigMap's file with the Secret's keys", r.status === 0,
    (r.stdout || "") + (r.stderr || ""));
  fs.rmSync(tmp, { recursive: true, force: true });
} else if (cm) {
  result("flashgate --check-config on the ConfigMap's file", false, `no flashgate binary in FG_BIN (${process.env.FG_BIN})`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
