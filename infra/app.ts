/**
 * CDK app (cdk.json runs it with tsx). One stage per synth: `--context stage=dev|prod` (default dev).
 * Needs no AWS credentials: accounts and regions are fixed in infra/stages.ts, nothing is looked up.
 * Function code is bundled by the local esbuild; the model layer comes from layers/models/build (built
 * here if stale), the native-modules layer from node_modules. cdk-nag AwsSolutions checks every stack.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { ensureModelLayer } from './constructs/layers.ts';
import { addService } from './service.ts';
import { isStage, STAGES } from './stages.ts';

const app = new App();
const stage: unknown = app.node.tryGetContext('stage') ?? 'dev';
if (!isStage(stage))
  throw new Error(`Unknown stage ${String(stage)}: use --context stage=${STAGES.join('|')}`);

ensureModelLayer();
addService(app, stage, { codeMode: 'esbuild', nativeLayer: 'staged' });
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
