/**
 * The service for one stage: the stateful stack and the API stack that uses it. Shared by infra/app.ts
 * (synth, deploy) and the infra tests (which choose stub code instead of esbuild bundles).
 */
import type { App } from 'aws-cdk-lib';
import type { CodeMode } from './constructs/endpoint-function.ts';
import { ApiStack } from './stacks/api-stack.ts';
import { StatefulStack } from './stacks/stateful-stack.ts';
import { STAGE_CONFIG, type Stage, type StageConfig } from './stages.ts';
import type { Route } from '#lib/http/routes.ts';

export interface ServiceOptions {
  codeMode: CodeMode;
  nativeLayer: 'staged' | 'stub';
  routes?: readonly Route[];
  modelDir?: string;
  importWorkerEntry?: string;
  /** The stage's settings (default: STAGE_CONFIG[stage]); tests pass variants. */
  config?: StageConfig;
}

export function stackName(stage: Stage, part: 'Stateful' | 'Api'): string {
  return `Vps-${stage}-${part}`;
}

export function addService(
  app: App,
  stage: Stage,
  { config = STAGE_CONFIG[stage], ...options }: ServiceOptions,
): { stateful: StatefulStack; api: ApiStack } {
  const tags = { service: 'visual-product-search', stage };
  const stateful = new StatefulStack(app, stackName(stage, 'Stateful'), {
    stage,
    config,
    env: config.env,
    tags,
    description: `Visual product search (${stage}): tables, assets bucket, import queue, OpenSearch domain`,
    terminationProtection: stage === 'prod',
  });
  const api = new ApiStack(app, stackName(stage, 'Api'), {
    stage,
    config,
    env: config.env,
    tags,
    description: `Visual product search (${stage}): REST APIs, functions, layers, usage plans`,
    stateful,
    ...options,
  });
  return { stateful, api };
}
