// Validates Kubernetes objects offline (no cluster, no network) in two passes:
// the API's JSON schemas bundled in kubernetes-models (types, required fields,
// enums), then the field lists of @kubernetes/client-node's generated models,
// which reject unknown or misspelt fields the way `kubectl apply
// --validate=strict` does.
//
//   node k8s.mjs FILE.yaml...      # multi-document YAML files
//   kubectl kustomize ../k8s | node k8s.mjs -
//
// Every object must have an apiVersion and kind known to kubernetes-models
// and pass its schema (required fields, types, enums, no unknown fields where
// the API forbids them). Prints one line per object; exits 1 on any failure.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

async function modelFor(apiVersion, kind) {
  // "apps/v1" → kubernetes-models/apps/v1/Deployment; "v1" → kubernetes-models/v1/Service.
  const path = `kubernetes-models/${apiVersion}/${kind}`;
  try {
    const mod = await import(path);
    return mod[kind] ?? mod.default;
  } catch (err) {
    if (err.code === "ERR_PACKAGE_PATH_NOT_EXPORTED" || err.code === "ERR_MODULE_NOT_FOUND") {
      return null;
    }
    throw err;
  }
}

function readInputs(args) {
  if (args.length === 0) {
    console.error("usage: node k8s.mjs FILE.yaml... | -");
    process.exit(2);
  }
  return args.map((a) => ({ name: a === "-" ? "<stdin>" : a, text: readFileSync(a === "-" ? 0 : a, "utf8") }));
}

const MODELS = "@kubernetes/client-node/dist/gen/models";
const modelCache = new Map();

// clientModel returns the generated client model class of a type name such
// as V1DeploymentSpec, or null when there is none.
async function clientModel(name) {
  if (!modelCache.has(name)) {
    let cls = null;
    try {
      cls = (await import(`${MODELS}/${name}.js`))[name] ?? null;
    } catch (err) {
      if (err.code !== "ERR_MODULE_NOT_FOUND") throw err;
    }
    modelCache.set(name, cls);
  }
  return modelCache.get(name);
}

// rootModelName maps apps/v1 + Deployment to V1Deployment, autoscaling/v2 +
// HorizontalPodAutoscaler to V2HorizontalPodAutoscaler.
function rootModelName(apiVersion, kind) {
  const version = apiVersion.split("/").pop();
  return version.charAt(0).toUpperCase() + version.slice(1) + kind;
}

// unknownFields walks value as the client model type and returns the JSON
// paths of fields the type does not have.
async function unknownFields(value, type, path) {
  if (value === null || value === undefined) return [];
  let m;
  if ((m = /^Array<(.+)>$/.exec(type))) {
    if (!Array.isArray(value)) return [];
    const out = [];
    for (let i = 0; i < value.length; i++) out.push(...(await unknownFields(value[i], m[1], `${path}/${i}`)));
    return out;
  }
  if ((m = /^\{ \[key: string\]: (.+); \}$/.exec(type))) {
    if (typeof value !== "object") return [];
    const out = [];
    for (const [k, v] of Object.entries(value)) out.push(...(await unknownFields(v, m[1], `${path}/${k}`)));
    return out;
  }
  const cls = /^[A-Z]\w*$/.test(type) ? await clientModel(type) : null;
  if (!cls || typeof value !== "object" || Array.isArray(value)) return [];
  const attrs = new Map(cls.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  const out = [];
  for (const [k, v] of Object.entries(value)) {
    if (!attrs.has(k)) {
      out.push(`${path}/${k}`);
      continue;
    }
    out.push(...(await unknownFields(v, attrs.get(k), `${path}/${k}`)));
  }
  return out;
}

let failed = 0;
let checked = 0;
for (const { name, text } of readInputs(process.argv.slice(2))) {
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) {
      failed++;
      console.log(`FAIL ${name}: YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
      continue;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue; // an empty document
    const id = `${name}: ${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
    checked++;
    if (!obj.apiVersion || !obj.kind) {
      failed++;
      console.log(`FAIL ${id}: apiVersion and kind are required`);
      continue;
    }
    const Model = await modelFor(obj.apiVersion, obj.kind);
    if (!Model) {
      failed++;
      console.log(`FAIL ${id}: unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`);
      continue;
    }
    const rootName = rootModelName(obj.apiVersion, obj.kind);
    if (!(await clientModel(rootName))) {
      failed++;
      console.log(`FAIL ${id}: no client model ${rootName} to check its fields against`);
      continue;
    }
    const problems = (await unknownFields(obj, rootName, "")).map((p) => `unknown field ${p}`);
    try {
      new Model(obj).validate();
    } catch (err) {
      problems.push(...(err.errors ? err.errors.map((e) => `${e.instancePath || "/"} ${e.message}`) : [err.message]));
    }
    if (problems.length > 0) {
      failed++;
      console.log(`FAIL ${id}: ${problems.join("; ")}`);
    } else {
      console.log(`ok   ${id} (${obj.apiVersion})`);
    }
  }
}
console.log(`${checked - failed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
