// Envoy Gateway's configuration file (kind EnvoyGateway, the
// envoy-gateway-config ConfigMap, Helm's config.envoyGateway), the parts
// deploy/kubernetes/envoy-gateway/ sets, as envoyproxy/gateway's
// api/v1alpha1 declares them (envoygateway_types.go, shared_types.go,
// ratelimit_types.go). EnvoyGateway is not a CRD, so no published schema
// covers it; tsc's excess property checks refuse a field not declared
// here, and the Kubernetes types inside come from kubernetes-models.
import type { IContainer } from "kubernetes-models/v1/Container";
import type { IResourceRequirements } from "kubernetes-models/v1/ResourceRequirements";
import type { ISecurityContext } from "kubernetes-models/v1/SecurityContext";
import type { IEnvVar } from "kubernetes-models/v1/EnvVar";
import type { IVolumeMount } from "kubernetes-models/v1/VolumeMount";
import type { IPodSecurityContext } from "kubernetes-models/v1/PodSecurityContext";
import type { IAffinity } from "kubernetes-models/v1/Affinity";
import type { IToleration } from "kubernetes-models/v1/Toleration";
import type { IVolume } from "kubernetes-models/v1/Volume";
import type { ILocalObjectReference } from "kubernetes-models/v1/LocalObjectReference";
import type { ITopologySpreadConstraint } from "kubernetes-models/v1/TopologySpreadConstraint";
import type { IDeploymentStrategy } from "kubernetes-models/apps/v1/DeploymentStrategy";
import type { IDeployment } from "kubernetes-models/apps/v1/Deployment";

// A strategic merge patch of a Deployment: any part of one.
export type DeepPartial<T> = T extends (infer U)[] ? DeepPartial<U>[]
  : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;

export interface KubernetesPatchSpec {
  type?: "StrategicMerge" | "JSONMerge" | "Replace";
  value: DeepPartial<IDeployment>;
}
export interface KubernetesContainerSpec {
  env?: IEnvVar[];
  resources?: IResourceRequirements;
  securityContext?: ISecurityContext;
  image?: string;
  imageRepository?: string;
  volumeMounts?: IVolumeMount[];
}
export interface KubernetesPodSpec {
  annotations?: { [k: string]: string };
  labels?: { [k: string]: string };
  securityContext?: IPodSecurityContext;
  affinity?: IAffinity;
  tolerations?: IToleration[];
  volumes?: IVolume[];
  imagePullSecrets?: ILocalObjectReference[];
  nodeSelector?: { [k: string]: string };
  topologySpreadConstraints?: ITopologySpreadConstraint[];
  priorityClassName?: string;
}
export interface KubernetesDeploymentSpec {
  patch?: KubernetesPatchSpec;
  replicas?: number;
  strategy?: IDeploymentStrategy;
  pod?: KubernetesPodSpec;
  container?: KubernetesContainerSpec;
  initContainers?: IContainer[];
  name?: string;
}
export interface EnvoyGatewayKubernetesProvider {
  rateLimitDeployment?: KubernetesDeploymentSpec;
}
export interface EnvoyGatewayProvider {
  type: "Kubernetes" | "Custom";
  kubernetes?: EnvoyGatewayKubernetesProvider;
}
export interface RateLimitRedisSettings {
  url?: string;
}
export interface RateLimit {
  backend: { type: "Redis"; redis?: RateLimitRedisSettings };
  timeout?: string;
  failClosed?: boolean;
}
export interface EnvoyGateway {
  apiVersion: "gateway.envoyproxy.io/v1alpha1";
  kind: "EnvoyGateway";
  gateway?: { controllerName?: string };
  provider?: EnvoyGatewayProvider;
  rateLimit?: RateLimit;
}
