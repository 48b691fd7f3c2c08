/**
 * `npm run bench:cold-lambda`: the cold start of the image search function as Lambda runs it (DESIGN §6:
 * first request after process start ≤ 1.5 s), measured here without AWS:
 * 1. the demo feed is imported into a local data folder (the local stack, then closed);
 * 2. the SearchImage function is bundled exactly as the CDK app bundles it (EndpointFunction: esbuild,
 *    ESM, minified, native modules left to the layer), and the native-modules layer is staged next to it
 *    as /opt/nodejs/node_modules is on Lambda;
 * 3. the embedded DynamoDB and S3 servers serve that folder, and for each run a new `node` process
 *    imports the bundle and calls its handler with an API Gateway event of a 1000 × 750 photo search,
 *    twice. The child prints, from its own time origin (before any module loaded): the bundle loaded, the
 *    first answer (models, OpenCV, caches, connections all cold), and the second.
 * What differs from Lambda: the stores answer on loopback (DynamoDB and S3 are a few ms away in AWS),
 * the vectors and words are the local indices (OpenSearch in AWS), the layer is a local folder, the CPU
 * is this machine's (1,769 MB of memory is one vCPU), and Lambda's own runtime start is not in it.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { App, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import { RetentionDays } from 'aws-cdk-lib/aws-logs';
import sharp from 'sharp';
import { stageNativeModules } from '#layers/lambda/native-modules.ts';
import { startEmbeddedStores } from '#lib/local/embedded-stores.ts';
import { startLocalStack } from '#lib/local/stack.ts';
import { EndpointFunction, REPO_ROOT } from '../infra/constructs/endpoint-function.ts';

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const work = mkdtempSync(join(tmpdir(), 'vps-cold-lambda-'));
const dataDir = join(work, 'data');

// 1. The demo feed, imported the normal way.
const stack = await startLocalStack({
  ...process.env,
  LOG_LEVEL: 'silent',
  PORT: '0',
  DATA_DIR: dataDir,
  LOCAL_FEATURE_WORKERS: '0',
});
await stack.importsIdle();
const { searchId } = stack.demo;
await stack.close();

// 2. The function's bundle and the layer.
const bundleStart = performance.now();
const app = new App({ outdir: join(work, 'cdk.out'), context: { 'aws:cdk:enable-asset-metadata': true } });
const cdkStack = new Stack(app, 'ColdLambda', { env: { account: '111111111111', region: 'eu-west-1' } });
const search = new EndpointFunction(cdkStack, 'SearchImage', {
  functionName: 'cold-SearchImage',
  entry: 'functions/search-image.ts',
  handler: 'handler',
  description: 'cold start bench',
  memorySize: 2048,
  timeout: Duration.seconds(29),
  logRetention: RetentionDays.ONE_DAY,
  removalPolicy: RemovalPolicy.DESTROY,
  environment: {},
  codeMode: 'esbuild',
});
const assembly = app.synth();
const template = assembly.getStackByName('ColdLambda').template as {
  Resources: Record<string, { Metadata?: Record<string, string> }>;
};
const assetDir = join(
  assembly.directory,
  template.Resources[cdkStack.getLogicalId(search.fn.node.defaultChild as never)]!.Metadata![
    'aws:asset:path'
  ]!,
);
stageNativeModules(join(work, 'layer'), 'x86_64');
symlinkSync(join(work, 'layer', 'nodejs', 'node_modules'), join(assetDir, 'node_modules'), 'dir');
const bundleBytes = readFileSync(join(assetDir, 'index.mjs')).length;
console.log(
  `bundle ${(bundleBytes / 1e6).toFixed(1)} MB, built in ${((performance.now() - bundleStart) / 1000).toFixed(1)} s`,
);

// 3. The stores, and one process per cold start.
const stores = await startEmbeddedStores(dataDir);
const photo = await sharp(join(REPO_ROOT, 'demo/images/tools-multimeter2.webp'))
  .resize(1000, 750, { fit: 'cover' })
  .jpeg({ quality: 90 })
  .toBuffer();
const event = {
  resource: '/api/v1/search/image',
  path: '/api/v1/search/image',
  httpMethod: 'POST',
  headers: { 'content-type': 'application/json', authorization: `Bearer ${searchId}` },
  multiValueHeaders: {},
  queryStringParameters: null,
  multiValueQueryStringParameters: null,
  pathParameters: null,
  stageVariables: null,
  body: JSON.stringify({ imageData: photo.toString('base64'), limit: 10 }),
  isBase64Encoded: false,
  requestContext: { requestId: 'cold-1', stage: 'dev', identity: { sourceIp: '127.0.0.1' } },
};
writeFileSync(join(work, 'event.json'), JSON.stringify(event));
const child = join(work, 'invoke.mjs');
writeFileSync(
  child,
  `const at = () => performance.now();
const { handler } = await import(${JSON.stringify(pathToFileURL(join(assetDir, 'index.mjs')).href)});
const loaded = at();
// A new event per call: the middleware parses the body in place.
const text = (await import('node:fs')).readFileSync(${JSON.stringify(join(work, 'event.json'))}, 'utf8');
const context = { awsRequestId: 'cold', functionName: 'cold-SearchImage', getRemainingTimeInMillis: () => 29000 };
const first = await handler(JSON.parse(text), context);
const firstAt = at();
const second = await handler(JSON.parse(text), context);
const secondAt = at();
if (process.env.BENCH_DEBUG) console.error(first.body.slice(0, 600), second.body.slice(0, 200));
console.log(JSON.stringify({ loaded, first: firstAt, second: secondAt - firstAt, status: [first.statusCode, second.statusCode], results: JSON.parse(first.body).length }));
process.exit(0);
`,
);
const env = {
  PATH: process.env.PATH ?? '',
  NODE_OPTIONS: '--enable-source-maps',
  STAGE: 'local',
  LOG_LEVEL: 'silent',
  AWS_REGION: 'eu-west-1',
  DYNAMODB_ENDPOINT: stores.dynamodbEndpoint,
  S3_ENDPOINT: stores.s3Endpoint,
  VECTOR_INDEX: 'local',
  VECTOR_INDEX_DIR: join(dataDir, 'vectors'),
  MODEL_DIR: join(REPO_ROOT, 'layers/models/build'),
  LOCAL_FEATURE_WORKERS: '0',
};
const rows: { loaded: number; first: number; second: number; status: number[]; results: number }[] = [];
try {
  for (let run = 0; run < RUNS; run += 1) {
    // Asynchronously: this process's event loop serves the stores the child talks to.
    const { stdout: out, stderr } = await promisify(execFile)(process.execPath, [child], {
      env: { ...env, ...(process.env.BENCH_DEBUG ? { BENCH_DEBUG: '1' } : {}) },
      encoding: 'utf8',
    });
    if (process.env.BENCH_DEBUG) console.log(stderr);
    const row = JSON.parse(out.trim().split('\n').pop()!) as (typeof rows)[number];
    rows.push(row);
    console.log(
      `run ${run + 1}: bundle loaded ${row.loaded.toFixed(0)} ms, first answer ${row.first.toFixed(0)} ms ` +
        `after process start (status ${row.status.join(' and ')}, ${row.results} results), second search ${row.second.toFixed(0)} ms`,
    );
  }
  const median = (values: number[]) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  console.log(
    `median of ${RUNS}: bundle loaded ${median(rows.map((r) => r.loaded)).toFixed(0)} ms, first answer ` +
      `${median(rows.map((r) => r.first)).toFixed(0)} ms, second search ${median(rows.map((r) => r.second)).toFixed(0)} ms`,
  );
} finally {
  await stores.close();
  rmSync(work, { recursive: true, force: true });
}
