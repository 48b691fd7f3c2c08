/**
 * Synthesises the service for the infra tests, in-process: stub function code instead of esbuild bundles
 * and an empty native-modules layer (both proven by bundling.test.ts), the real model layer, the feature
 * flags of cdk.json, and cdk-nag AwsSolutions checks (synth throws on an unacknowledged finding).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { App, Validations } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { AwsSolutionsChecks } from 'cdk-nag';
import { REPO_ROOT } from '../../infra/constructs/endpoint-function.ts';
import { ensureModelLayer } from '../../infra/constructs/layers.ts';
import { addService } from '../../infra/service.ts';
import type { Stage } from '../../infra/stages.ts';

export interface Synthesised {
  app: App;
  stateful: Template;
  api: Template;
  assemblyDir: string;
  service: ReturnType<typeof addService>;
}

export function synthStage(stage: Stage): Synthesised {
  ensureModelLayer();
  const context = (
    JSON.parse(readFileSync(join(REPO_ROOT, 'cdk.json'), 'utf8')) as { context: Record<string, unknown> }
  ).context;
  // Asset metadata (as the CLI records it) lets tests find an asset's staged directory.
  const app = new App({ context: { ...context, 'aws:cdk:enable-asset-metadata': true } });
  const service = addService(app, stage, { codeMode: 'inline', nativeLayer: 'stub' });
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  const assembly = app.synth();
  return {
    app,
    service,
    stateful: Template.fromStack(service.stateful),
    api: Template.fromStack(service.api),
    assemblyDir: assembly.directory,
  };
}

type Resources = Record<
  string,
  {
    Type: string;
    Properties?: Record<string, unknown>;
    DeletionPolicy?: string;
    Metadata?: Record<string, unknown>;
  }
>;

export function resources(template: Template, type?: string): Resources {
  const all = template.toJSON().Resources as Resources;
  if (!type) return all;
  return Object.fromEntries(Object.entries(all).filter(([, resource]) => resource.Type === type));
}

/** Logical id of the function with this physical name. */
export function functionId(template: Template, functionName: string): string {
  const found = Object.entries(resources(template, 'AWS::Lambda::Function')).find(
    ([, fn]) => fn.Properties?.FunctionName === functionName,
  );
  if (!found) throw new Error(`no function named ${functionName}`);
  return found[0];
}

export interface Statement {
  Effect: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: unknown;
}

/** Every statement of the policies attached to a function's role. */
export function statementsOf(template: Template, fnId: string): Statement[] {
  const fn = resources(template)[fnId]!;
  const role = (fn.Properties?.Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
  return Object.values(resources(template, 'AWS::IAM::Policy'))
    .filter((policy) => JSON.stringify(policy.Properties?.Roles).includes(`"${role}"`))
    .flatMap((policy) => (policy.Properties?.PolicyDocument as { Statement: Statement[] }).Statement);
}

export function actionsOf(statement: Statement): string[] {
  return Array.isArray(statement.Action) ? statement.Action : [statement.Action];
}

/** Actions a function may perform on resources whose rendered ARN contains `fragment`. */
export function actionsOn(statements: Statement[], fragment: string): Set<string> {
  const out = new Set<string>();
  for (const statement of statements) {
    if (statement.Effect !== 'Allow') continue;
    const list = Array.isArray(statement.Resource) ? statement.Resource : [statement.Resource];
    if (list.some((resource) => JSON.stringify(resource).includes(fragment)))
      for (const a of actionsOf(statement)) out.add(a);
  }
  return out;
}

/** A CloudFormation value with intrinsics replaced by placeholders (for parsing environments). */
export function placeholder(value: unknown): string {
  if (typeof value === 'string') return value;
  const node = value as Record<string, unknown>;
  if (node['Fn::Join']) {
    const [delimiter, parts] = node['Fn::Join'] as [string, unknown[]];
    return parts.map(placeholder).join(delimiter);
  }
  return 'token';
}
