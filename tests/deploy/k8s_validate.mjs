// Checks every object in deploy/kubernetes/ (see k8s_validate.sh):
// kubernetes-models' schema validation here, and objects.ts written for
// tsc (the same objects typed by kubernetes-models' interfaces, and Envoy
// Gateway's configuration by envoy_gateway.d.ts), then what no schema
// says: selectors, references, probes, the security context.
// Usage: node k8s_validate.mjs DEPLOY_KUBERNETES_DIR WORK_DIR
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const [dir, work] = process.argv.slice(2);
const fails = [];
const fail = (what) => { fails.push(what); console.log("FAIL:", what); };

function walk(d) {
  return fs.readdirSync(d, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(path.join(d, e.name))
      : e.name.endsWith(".yaml") ? [path.join(d, e.name)] : []);
}

const objects = [];   // [file, object]
let egConfig = null;
let kustomization = null;
for (const file of walk(dir).sort()) {
  const rel = path.relative(dir, file);
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) fail(`${rel}: ${doc.errors[0].message}`);
    const o = doc.toJS();
    if (o === null) continue;
    if (rel === "kustomization.yaml") kustomization = o;
    else if (rel === "envoy-gateway/helm-values.yaml") {
      egConfig = { apiVersion: "gateway.envoyproxy.io/v1alpha1",
                   kind: "EnvoyGateway", ...o.config.envoyGateway };
      if (Object.keys(o).join() !== "config" ||
          Object.keys(o.config).join() !== "envoyGateway")
        fail(`${rel}: only config.envoyGateway expected`);
    } else objects.push([rel, o]);
  }
}
if (!kustomization) fail("no kustomization.yaml");
if (!egConfig) fail("no envoy-gateway/helm-values.yaml");

// 1. Each object against its schema.
function modulePath(o) {
  const [group, version] = o.apiVersion.includes("/")
    ? o.apiVersion.split("/") : [null, o.apiVersion];
  return `kubernetes-models/${group ? group + "/" : ""}${version}/${o.kind}`;
}
const ts = [];
let n = 0;
for (const [rel, o] of objects) {
  const mod = modulePath(o);
  let Model;
  try {
    Model = (await import(mod))[o.kind];
  } catch (e) {
    fail(`${rel}: ${o.apiVersion} ${o.kind}: no such API (${e.message})`);
    continue;
  }
  try {
    new Model(o).validate();
  } catch (e) {
    fail(`${rel}: ${o.kind}/${o.metadata?.name}: ${e.message}`);
  }
  ts.push(`import type { I${o.kind} as T${n} } from "${mod}";`,
          `// ${rel}: ${o.kind}/${o.metadata?.name}`,
          `export const o${n}: T${n} = ${JSON.stringify(o)};`);
  n++;
}
ts.push(`import type { EnvoyGateway } from "./envoy_gateway.js";`,
        `// envoy-gateway/helm-values.yaml: config.envoyGateway`,
        `export const eg: EnvoyGateway = ${JSON.stringify(egConfig)};`);
fs.writeFileSync(path.join(work, "objects.ts"), ts.join("\n") + "\n");
fs.writeFileSync(path.join(work, "tsconfig.json"), JSON.stringify({
  compilerOptions: { strict: true, noEmit: true, module: "nodenext",
                     moduleResolution: "nodenext", target: "es2022",
                     skipLibCheck: true },
  files: ["objects.ts", "envoy_gateway.d.ts"] }));

// 2. What the schemas do not say.
const byKind = (k) => objects.filter(([, o]) => o.kind === k).map(([, o]) => o);
const matches = (sel, labels) =>
  Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);
const deployments = byKind("Deployment");
const configMaps = new Set(byKind("ConfigMap").map((o) => o.metadata.name));
for (const d of deployments) {
  const name = d.metadata.name;
  const tpl = d.spec.template;
  if (!matches(d.spec.selector.matchLabels, tpl.metadata.labels))
    fail(`Deployment/${name}: selector does not match its pods`);
  for (const v of tpl.spec.volumes ?? [])
    if (v.configMap && !configMaps.has(v.configMap.name))
      fail(`Deployment/${name}: no ConfigMap ${v.configMap.name}`);
  const psc = tpl.spec.securityContext ?? {};
  for (const c of tpl.spec.containers) {
    const where = `Deployment/${name} container ${c.name}`;
    const sc = c.securityContext ?? {};
    if (!/[:@]/.test(c.image.split("/").pop())) fail(`${where}: image has no tag`);
    if (!(sc.runAsNonRoot ?? psc.runAsNonRoot)) fail(`${where}: runAsNonRoot`);
    if (sc.readOnlyRootFilesystem !== true) fail(`${where}: readOnlyRootFilesystem`);
    if (sc.allowPrivilegeEscalation !== false) fail(`${where}: allowPrivilegeEscalation`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) fail(`${where}: drop ALL`);
    if ((sc.seccompProfile ?? psc.seccompProfile)?.type !== "RuntimeDefault")
      fail(`${where}: seccomp RuntimeDefault`);
    if (!c.resources?.requests || !c.resources?.limits?.memory)
      fail(`${where}: resources`);
    const ports = new Set((c.ports ?? []).flatMap((p) => [p.containerPort, p.name]));
    for (const pr of ["readinessProbe", "livenessProbe"])
      if (!c[pr]) fail(`${where}: no ${pr}`);
    for (const pr of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const port = c[pr]?.httpGet?.port ?? c[pr]?.tcpSocket?.port;
      if (port !== undefined && !ports.has(port))
        fail(`${where}: ${pr} on undeclared port ${port}`);
    }
    const ann = tpl.metadata.annotations ?? {};
    if (ann["prometheus.io/scrape"] === "true" &&
        !ports.has(Number(ann["prometheus.io/port"])))
      fail(`${where}: prometheus.io/port ${ann["prometheus.io/port"]} not a container port`);
  }
}
for (const s of byKind("Service")) {
  const d = deployments.find((d) => matches(s.spec.selector, d.spec.template.metadata.labels));
  if (!d) { fail(`Service/${s.metadata.name}: selects no Deployment's pods`); continue; }
  const named = new Set(d.spec.template.spec.containers.flatMap((c) =>
    (c.ports ?? []).flatMap((p) => [p.name, p.containerPort])));
  for (const p of s.spec.ports)
    if (!named.has(p.targetPort ?? p.port))
      fail(`Service/${s.metadata.name}: targetPort ${p.targetPort} not a container port`);
}
for (const p of byKind("PodDisruptionBudget"))
  if (!deployments.some((d) => matches(p.spec.selector.matchLabels, d.spec.template.metadata.labels)))
    fail(`PodDisruptionBudget/${p.metadata.name}: selects no pods`);
for (const h of byKind("HorizontalPodAutoscaler")) {
  const t = h.spec.scaleTargetRef;
  const d = deployments.find((d) => d.metadata.name === t.name);
  if (t.kind !== "Deployment" || !d) fail(`HorizontalPodAutoscaler/${h.metadata.name}: no target`);
  else if (h.spec.metrics?.some((m) => m.type === "Resource") &&
           d.spec.template.spec.containers.some((c) => !c.resources?.requests?.cpu))
    fail(`HorizontalPodAutoscaler/${h.metadata.name}: target without cpu requests`);
}

// kustomize: every manifest listed, every listed file there.
if (kustomization) {
  const known = ["apiVersion", "kind", "namespace", "resources", "images"];
  for (const k of Object.keys(kustomization))
    if (!known.includes(k)) fail(`kustomization.yaml: unexpected ${k}`);
  const files = new Set(objects.map(([rel]) => rel));
  for (const r of kustomization.resources)
    if (!files.has(r)) fail(`kustomization.yaml: no ${r}`);
  for (const f of files)
    if (!kustomization.resources.includes(f)) fail(`kustomization.yaml: ${f} not listed`);
  for (const i of kustomization.images ?? [])
    if (!deployments.some((d) => d.spec.template.spec.containers.some(
      (c) => c.image.split(":")[0] === i.name)))
      fail(`kustomization.yaml: image ${i.name} used by no container`);
}

// Envoy Gateway: the image swapped, and a patch (if any) that names EG's
// container, so it merges instead of adding a second one.
const rld = egConfig?.provider?.kubernetes?.rateLimitDeployment;
if (!rld?.container?.image) fail("EnvoyGateway: no rateLimitDeployment.container.image");
for (const c of rld?.patch?.value?.spec?.template?.spec?.containers ?? [])
  if (c.name !== "envoy-ratelimit")
    fail(`EnvoyGateway: patch names container ${c.name}, EG's is envoy-ratelimit`);

// What Envoy Gateway runs with that configuration: its own Deployment
// with container.image and resources set, then the patch applied as a
// strategic merge (lists of named things merged by their key, as
// Kubernetes' strategicpatch does for a Deployment).
const mergeKeys = { containers: "name", initContainers: "name", env: "name",
                    volumes: "name", ports: "containerPort",
                    volumeMounts: "mountPath" };
function smp(base, patch, field) {
  if (patch === null) return undefined;
  if (Array.isArray(patch)) {
    const key = mergeKeys[field];
    if (!key || !Array.isArray(base)) return structuredClone(patch);
    const out = structuredClone(base);
    for (const p of patch) {
      const i = out.findIndex((b) => b[key] === p[key]);
      if (i < 0) out.push(structuredClone(p));
      else out[i] = smp(out[i], p, null);
    }
    return out;
  }
  if (typeof patch !== "object" || typeof base !== "object" || base === null)
    return structuredClone(patch);
  const out = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const m = smp(base[k], v, k);
    if (m === undefined) delete out[k]; else out[k] = m;
  }
  return out;
}
const eg = YAML.parse(fs.readFileSync(path.join(work, "eg_ratelimit_deployment.yaml"), "utf8"));
const egc = eg.spec.template.spec.containers[0];
if (rld?.container?.image) egc.image = rld.container.image;
if (rld?.container?.resources) egc.resources = rld.container.resources;
if (rld?.patch && (rld.patch.type ?? "StrategicMerge") !== "StrategicMerge")
  fail("EnvoyGateway: only a StrategicMerge patch is checked here");
const run = rld?.patch ? smp(eg, rld.patch.value, null) : eg;
try {
  const { Deployment } = await import("kubernetes-models/apps/v1/Deployment");
  new Deployment(run).validate();
} catch (e) {
  fail(`EnvoyGateway: the patched Deployment: ${e.message}`);
}
fs.appendFileSync(path.join(work, "objects.ts"),
  `import type { IDeployment as TEG } from "kubernetes-models/apps/v1/Deployment";\n` +
  `// Envoy Gateway's Deployment with helm-values.yaml applied\n` +
  `export const egRun: TEG = ${JSON.stringify(run)};\n`);
fs.writeFileSync(path.join(work, "eg-deployment.json"), JSON.stringify(run, null, 1));
const rc = run.spec.template.spec.containers;
if (rc.length !== 1 || rc[0].name !== "envoy-ratelimit")
  fail(`EnvoyGateway: the patched Deployment has containers ${rc.map((c) => c.name)}`);
else {
  const c = rc[0];
  if (c.image !== rld?.container?.image) fail("EnvoyGateway: image not swapped");
  if (JSON.stringify(c.command) !== JSON.stringify(["/bin/ratelimit"]) || c.args)
    fail(`EnvoyGateway: command ${c.command} args ${c.args}: the image must run as EG runs it`);
  for (const pr of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const g = c[pr]?.httpGet;
    if (g?.path !== "/healthcheck" || g?.port !== 8080)
      fail(`EnvoyGateway: ${pr} is not GET :8080/healthcheck (${JSON.stringify(c[pr])})`);
  }
  const sc = c.securityContext ?? {};
  if (sc.runAsUser !== 65534 || sc.readOnlyRootFilesystem !== true)
    fail("EnvoyGateway: the container's securityContext changed");
  if (!c.resources?.limits?.memory) fail("EnvoyGateway: no memory limit");
}

// The rules, for rl-server --check-envoy-config.
fs.mkdirSync(path.join(work, "rules"));
for (const cm of byKind("ConfigMap"))
  for (const [k, v] of Object.entries(cm.data ?? {}))
    if (k.endsWith(".yaml"))
      fs.writeFileSync(path.join(work, "rules", `${cm.metadata.name}-${k}`), v);

fs.writeFileSync(path.join(work, "count"), String(n + 2));
if (fails.length) {
  console.log(`${fails.length} failures`);
  process.exit(1);
}
