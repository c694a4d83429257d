// check_k8s.mjs NODE_MODULES DIR: every document of DIR/*.yaml validated by kubernetes-models'
// class for its apiVersion and kind, a broken copy of each workload refused (so the check can
// fail), then the gateway StatefulSet's promises. Prints "N passed, M failed".
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

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
  if (obj.spec?.template?.spec?.containers) {
    const broken = structuredClone(obj);
    broken.spec.template.spec.containers[0].ports = [{ containerPort: "http" }];
    result(`${f}: ${obj.kind} ${obj.metadata.name} with a string containerPort is refused`, !!validate(Cls, broken));
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
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
