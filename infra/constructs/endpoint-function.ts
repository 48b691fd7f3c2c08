import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Duration, type RemovalPolicy, Validations } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { NodejsFunction, OutputFormat, SourceMapMode } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { NATIVE_MODULES } from '#layers/lambda/native-modules.ts';

/** Repository root (entries in lib/http/routes.ts are relative to it). */
export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Chosen once for every function and layer: the x64 prebuilt binaries (sharp, onnxruntime) installed here. */
export const ARCHITECTURE = lambda.Architecture.X86_64;
/**
 * Node.js 24 (LTS until 2028-04): Lambda blocks creating Node 20 functions from 2027-02-01. The toolchain
 * here is Node 20 (engines >=20.19): the bundles keep its syntax level, which Node 24 runs. What could
 * break is an API that Node 24 removed or changed: the whole suite, the bundle tests included, ran on
 * Node 24 before the switch (docs/deploy.md).
 */
export const RUNTIME = lambda.Runtime.NODEJS_24_X;
const RUNTIME_REASON =
  'Node.js 24 is the project runtime (docs/deploy.md): the newest Lambda Node.js runtime this aws-cdk-lib release knows and the one the suite was checked on.';

/**
 * How function code is produced. `esbuild`: real bundles (synth, deploy). `inline`: a one-line stub per
 * function, for assertion tests that need the template, not the bundles (bundling 13+ functions with
 * esbuild on 2 cores takes tens of seconds).
 */
export type CodeMode = 'esbuild' | 'inline';

/** Props of {@link EndpointFunction}. */
export interface EndpointFunctionProps {
  /** Physical function name. */
  functionName: string;
  /** Handler module, relative to the repository root (e.g. functions/search-image.ts). */
  entry: string;
  /** Exported handler name. */
  handler: string;
  description: string;
  memorySize: number;
  timeout: Duration;
  logRetention: logs.RetentionDays;
  removalPolicy: RemovalPolicy;
  environment: Record<string, string>;
  layers?: lambda.ILayerVersion[];
  codeMode: CodeMode;
}

/**
 * One Lambda function with the service's shared defaults: Node 24, one architecture, ESM bundle built
 * by the local esbuild (never Docker), the AWS SDK bundled at the pinned version, the native modules left
 * to the native layer, an explicit log group with retention, source maps on.
 */
export class EndpointFunction extends Construct {
  readonly fn: lambda.Function;

  constructor(scope: Construct, id: string, props: EndpointFunctionProps) {
    super(scope, id);
    const logGroup = new logs.LogGroup(this, 'Logs', {
      logGroupName: `/aws/lambda/${props.functionName}`,
      retention: props.logRetention,
      removalPolicy: props.removalPolicy,
    });
    const common = {
      functionName: props.functionName,
      description: props.description,
      runtime: RUNTIME,
      architecture: ARCHITECTURE,
      memorySize: props.memorySize,
      timeout: props.timeout,
      logGroup,
      layers: props.layers,
      environment: props.environment,
    } satisfies Partial<lambda.FunctionProps>;

    if (props.codeMode === 'inline') {
      this.fn = new lambda.Function(this, 'Function', {
        ...common,
        handler: `index.${props.handler}`,
        code: lambda.Code.fromInline(`exports.${props.handler} = async () => ({ statusCode: 501 });`),
      });
    } else {
      this.fn = new NodejsFunction(this, 'Function', {
        ...common,
        entry: join(REPO_ROOT, props.entry),
        handler: props.handler,
        projectRoot: REPO_ROOT,
        depsLockFilePath: join(REPO_ROOT, 'package-lock.json'),
        bundling: {
          forceDockerBundling: false,
          format: OutputFormat.ESM,
          // The toolchain's Node 20 syntax level: the bundle runs on Node 24 and on the local Node 20 alike.
          target: 'node20',
          platform: 'node',
          mainFields: ['module', 'main'],
          // CommonJS dependencies inside an ESM bundle still call require() for Node built-ins.
          banner:
            "import { createRequire as __vpsCreateRequire } from 'node:module'; const require = __vpsCreateRequire(import.meta.url);",
          minify: true,
          sourceMap: true,
          sourceMapMode: SourceMapMode.EXTERNAL,
          sourcesContent: false,
          bundleAwsSDK: true,
          externalModules: [...NATIVE_MODULES],
          tsconfig: join(REPO_ROOT, 'tsconfig.json'),
        },
      });
      this.fn.addEnvironment('NODE_OPTIONS', '--enable-source-maps');
    }

    Validations.of(this).acknowledge({
      id: 'AwsSolutions-L1',
      reason: RUNTIME_REASON,
    });
    Validations.of(this).acknowledge({ id: 'CloudFormation-Validate::W2531', reason: RUNTIME_REASON });
    Validations.of(this).acknowledge({
      id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
      reason:
        'AWSLambdaBasicExecutionRole only allows writing CloudWatch Logs; it is the standard execution policy for Lambda.',
    });
  }
}
