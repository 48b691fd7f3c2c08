/**
 * CDK app (cdk.json runs it with tsx). One stage per synth: `--context stage=dev|prod` (default dev).
 * Needs no AWS credentials: accounts and regions are fixed in infra/stages.ts, nothing is looked up.
 * Function code is bundled by the local esbuild; the model layer comes from layers/models/build (built
 * here if stale), the native-modules layer from node_modules. cdk-nag AwsSolutions checks every stack.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { REPO_ROOT } from './constructs/endpoint-function.ts';
import { modelFiles } from './constructs/layers.ts';
import { addService } from './service.ts';
import { isStage, STAGES } from './stages.ts';

/** Builds the model layer when stale (layers/build.ts --if-stale), or fails with the command to run. */
function ensureModelLayer(): void {
  const build = join(REPO_ROOT, 'layers', 'build.ts');
  if (existsSync(build)) {
    const result = spawnSync(join(REPO_ROOT, 'node_modules', '.bin', 'tsx'), [build, '--if-stale'], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (result.status !== 0)
      throw new Error('The model layer build (layers/build.ts --if-stale) failed; see above.');
  }
  modelFiles();
}

const app = new App();
const stage: unknown = app.node.tryGetContext('stage') ?? 'dev';
if (!isStage(stage))
  throw new Error(`Unknown stage ${String(stage)}: use --context stage=${STAGES.join('|')}`);

ensureModelLayer();
addService(app, stage, { codeMode: 'esbuild', nativeLayer: 'staged' });
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
