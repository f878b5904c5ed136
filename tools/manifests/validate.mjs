// Validates Kubernetes manifests against Kubernetes' OpenAPI schemas and KEDA's CRD
// schemas, as the packages kubernetes-models and @kubernetes-models/keda compile them,
// and refuses a field no schema has (as `kubectl apply --validate=strict` does).
//
// Usage: node validate.mjs FILE...            every document of every file; exit 1 if any
//                                             is refused, each problem on a line
//        node validate.mjs --mutate FILE...   each field name of each document misspelled
//                                             in turn: exit 1 unless every one is refused
//
// The compiled schemas accept fields they do not know (the OpenAPI schemas leave
// additionalProperties open), so each document is validated through proxies that see
// which keys the validator reads: in an object the validator does not enumerate (not
// a map such as labels or a trigger's metadata), a key it never read is unknown.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// API versions Kubernetes no longer serves, and the release that removed them (its
// Deprecated API Migration Guide): the packages keep their schemas, kubectl refuses them.
const REMOVED = {
  "extensions/v1beta1": "1.22", "apps/v1beta1": "1.16", "apps/v1beta2": "1.16",
  "admissionregistration.k8s.io/v1beta1": "1.22", "apiextensions.k8s.io/v1beta1": "1.22",
  "apiregistration.k8s.io/v1beta1": "1.22", "authentication.k8s.io/v1beta1": "1.22",
  "authorization.k8s.io/v1beta1": "1.22", "certificates.k8s.io/v1beta1": "1.22",
  "coordination.k8s.io/v1beta1": "1.22", "networking.k8s.io/v1beta1": "1.22",
  "rbac.authorization.k8s.io/v1beta1": "1.22", "scheduling.k8s.io/v1beta1": "1.22",
  "storage.k8s.io/v1beta1": "1.27", "batch/v1beta1": "1.25", "discovery.k8s.io/v1beta1": "1.25",
  "events.k8s.io/v1beta1": "1.25", "autoscaling/v2beta1": "1.25", "autoscaling/v2beta2": "1.26",
  "policy/v1beta1": "1.25", "node.k8s.io/v1beta1": "1.25",
  "flowcontrol.apiserver.k8s.io/v1beta1": "1.26", "flowcontrol.apiserver.k8s.io/v1beta2": "1.29",
  "flowcontrol.apiserver.k8s.io/v1beta3": "1.32",
};

// The compiled schema of a kind: its model's module names it.
async function schemaFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (!/^[A-Za-z0-9.-]*$/.test(group) || !/^v[0-9a-z]+$/.test(version) || !/^[A-Za-z]+$/.test(kind))
    return null;
  const model =
    group === "keda.sh" || group === "eventing.keda.sh"
      ? `@kubernetes-models/keda/${group}/${version}/${kind}`
      : `kubernetes-models/${group || version}${group ? "/" + version : ""}/${kind}`;
  try {
    const url = import.meta.resolve(model);
    const source = readFileSync(new URL(url), "utf8");
    const schema = source.match(/from\s*"(\.\.\/[^"]*_schemas\/[A-Za-z0-9]+\.js)"/);
    if (!schema) return null;
    return (await import(new URL(schema[1], url).href)).validate;
  } catch {
    return null;
  }
}

// A copy of `value` whose objects record the keys read and whether they were enumerated.
function tracked(value, path, records) {
  if (value === null || typeof value !== "object") return value;
  const record = { path, read: new Set(), enumerated: false, array: Array.isArray(value) };
  records.push(record);
  const target = record.array
    ? value.map((item, i) => tracked(item, `${path}/${i}`, records))
    : Object.fromEntries(
        Object.entries(value).map(([k, v]) => [k, tracked(v, `${path}/${k}`, records)]),
      );
  record.keys = Object.keys(target);
  return new Proxy(target, {
    get(t, key, receiver) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.get(t, key, receiver);
    },
    has(t, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.has(t, key);
    },
    ownKeys(t) {
      record.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

// The problems of one document: the schema's own errors, then unknown fields.
async function problemsOf(document) {
  const { apiVersion, kind } = document ?? {};
  if (typeof apiVersion !== "string" || typeof kind !== "string")
    return { problems: ["no apiVersion and kind"], maps: [] };
  if (REMOVED[apiVersion])
    return {
      problems: [`${apiVersion} is no longer served (removed in Kubernetes ${REMOVED[apiVersion]})`],
      maps: [],
    };
  const validate = await schemaFor(apiVersion, kind);
  if (!validate) return { problems: [`no schema for ${apiVersion} ${kind}`], maps: [] };
  const records = [];
  const ok = validate(tracked(document, "", records));
  const problems = ok
    ? []
    : validate.errors.map(
        (e) => `${e.instancePath || "/"}: ${e.keyword} ${JSON.stringify(e.params)}`,
      );
  const maps = [];
  for (const r of records) {
    if (r.array) continue;
    if (r.enumerated) {
      maps.push(r.path || "/");
      continue;
    }
    for (const key of r.keys)
      if (!r.read.has(key)) problems.push(`${r.path}/${key}: unknown field`);
  }
  return { problems, maps };
}

// Every key path of a document outside maps, and a copy with one key renamed.
function keyPaths(value, path = []) {
  if (value === null || typeof value !== "object") return [];
  if (Array.isArray(value)) return value.flatMap((item, i) => keyPaths(item, [...path, i]));
  return Object.entries(value).flatMap(([k, v]) => [[...path, k], ...keyPaths(v, [...path, k])]);
}
function renamed(document, path, to) {
  const copy = structuredClone(document);
  let parent = copy;
  for (const step of path.slice(0, -1)) parent = parent[step];
  const key = path[path.length - 1];
  // Kept in place: the renamed key where the original was.
  const entries = Object.entries(parent).map(([k, v]) => [k === key ? to : k, v]);
  for (const k of Object.keys(parent)) delete parent[k];
  Object.assign(parent, Object.fromEntries(entries));
  return copy;
}
// Two misspellings of a name: a letter added, the first letter's case changed.
const misspellings = (key) => [`${key}x`, key.charAt(0) === key.charAt(0).toUpperCase() ? key.charAt(0).toLowerCase() + key.slice(1) : key.charAt(0).toUpperCase() + key.slice(1)];

const args = process.argv.slice(2);
const mutate = args[0] === "--mutate";
const files = mutate ? args.slice(1) : args;
let failed = false;
let refused = 0;
const mapKeys = new Set();
for (const file of files) {
  const documents = parseAllDocuments(readFileSync(file, "utf8"));
  for (const parsed of documents) {
    if (parsed.errors.length) {
      console.log(`${file}: ${parsed.errors[0].message}`);
      failed = true;
      continue;
    }
    const document = parsed.toJS();
    if (document === null) continue;
    const name = `${file}: ${document.kind} ${document.metadata?.name ?? "?"}`;
    const { problems, maps } = await problemsOf(document);
    for (const p of problems) console.log(`${name}: ${p}`);
    if (problems.length) failed = true;
    if (!mutate) {
      if (!problems.length) console.log(`${name}: valid`);
      continue;
    }
    const inMap = (path) => {
      const parent = "/" + path.slice(0, -1).join("/");
      return maps.includes(parent === "/" ? "/" : parent) || maps.includes(parent);
    };
    for (const path of keyPaths(document)) {
      if (typeof path[path.length - 1] !== "string") continue;
      if (inMap(path)) {
        mapKeys.add(`${document.kind} /${path.join("/")}`);
        continue;
      }
      for (const to of misspellings(path[path.length - 1])) {
        const result = await problemsOf(renamed(document, path, to));
        if (result.problems.length) {
          ++refused;
        } else {
          console.log(`${name}: /${path.join("/")} misspelled as ${to} was accepted`);
          failed = true;
        }
      }
    }
  }
}
if (mutate)
  console.log(
    `${refused} misspellings refused; ${mapKeys.size} keys of maps, which take any key: ` +
      [...mapKeys].join(", "),
  );
process.exit(failed ? 1 : 0);
