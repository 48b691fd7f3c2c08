import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { App, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import { RetentionDays } from 'aws-cdk-lib/aws-logs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATIVE_MODULES, stageNativeModules } from '#layers/lambda/native-modules.ts';
import { EndpointFunction } from '../../infra/constructs/endpoint-function.ts';

/**
 * The assertion tests use stub code; these prove the real packaging: esbuild bundles (local, no Docker)
 * that load and answer, with the native modules coming from the staged layer as they would from
 * /opt/nodejs/node_modules.
 */
let work: string;
let assetDirs: Record<string, string>;

function bundle(stack: Stack, id: string, entry: string, handler: string): EndpointFunction {
  return new EndpointFunction(stack, id, {
    functionName: `bundling-${id}`,
    entry,
    handler,
    description: id,
    memorySize: 256,
    timeout: Duration.seconds(5),
    logRetention: RetentionDays.ONE_DAY,
    removalPolicy: RemovalPolicy.DESTROY,
    environment: {},
    codeMode: 'esbuild',
  });
}

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'vps-bundling-'));
  const app = new App({ outdir: join(work, 'cdk.out'), context: { 'aws:cdk:enable-asset-metadata': true } });
  const stack = new Stack(app, 'Bundling', { env: { account: '111111111111', region: 'eu-west-1' } });
  const functions = {
    authorizer: bundle(stack, 'Authorizer', 'functions/authorizer.ts', 'handler'),
    search: bundle(stack, 'SearchImage', 'functions/search-image.ts', 'handler'),
  };
  const assembly = app.synth();
  const template = assembly.getStackByName('Bundling').template as {
    Resources: Record<string, { Metadata?: Record<string, string> }>;
  };
  const pathOf = (fn: EndpointFunction) =>
    join(
      assembly.directory,
      template.Resources[stack.getLogicalId(fn.fn.node.defaultChild as never)]!.Metadata!['aws:asset:path']!,
    );
  assetDirs = { authorizer: pathOf(functions.authorizer), search: pathOf(functions.search) };
}, 120_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('function bundles', () => {
  it('bundles an ESM handler with the local esbuild that loads and answers', async () => {
    // Prepare
    expect(readdirSync(assetDirs.authorizer!)).toContain('index.mjs');
    process.env.GATEWAY_SHARED_KEY = 'shared-key-shared-key-1';

    // Act
    const module = (await import(pathToFileURL(join(assetDirs.authorizer!, 'index.mjs')).href)) as {
      handler(event: unknown): Promise<{ usageIdentifierKey?: string }>;
    };
    const result = await module.handler({ methodArn: 'arn:x', headers: {} });

    // Assess
    expect(result.usageIdentifierKey).toBe('shared-key-shared-key-1');
  });

  it('leaves the native modules to the layer and resolves every #lib import', () => {
    const code = readFileSync(join(assetDirs.search!, 'index.mjs'), 'utf8');
    for (const name of NATIVE_MODULES)
      expect(code, name).toMatch(new RegExp(`from\\s*"${name}"|import\\("${name}"\\)`));
    expect(code).not.toMatch(/["']#lib\//);
    expect(code).not.toContain('onnxruntime_binding.node');
    expect(code.length).toBeLessThan(8_000_000);
  });

  it('runs a public endpoint bundle against the staged native layer', async () => {
    // Prepare: the layer's node_modules next to the bundle, as /opt/nodejs/node_modules is on Lambda.
    const layer = join(work, 'layer');
    stageNativeModules(layer, 'x86_64');
    symlinkSync(join(layer, 'nodejs', 'node_modules'), join(assetDirs.search!, 'node_modules'), 'dir');

    // Act: a request without a search id is refused by the middleware before any store is called.
    const module = (await import(pathToFileURL(join(assetDirs.search!, 'index.mjs')).href)) as {
      handler(event: unknown, context: unknown): Promise<{ statusCode: number; body: string }>;
    };
    const response = await module.handler(
      {
        httpMethod: 'POST',
        path: '/api/v1/search/image',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ imageData: 'aGVsbG8=' }),
        requestContext: { requestId: 'req-1' },
      },
      { awsRequestId: 'req-1', getRemainingTimeInMillis: () => 5000 },
    );

    // Assess
    expect(response.statusCode).toBe(401);
    expect(JSON.parse(response.body)).toMatchObject({
      error: { code: 'missing_search_id' },
      requestId: 'req-1',
    });
  });
});

describe('native-modules layer', () => {
  it('stages onnxruntime, sharp and usearch for Linux x64 only, without any AWS SDK', () => {
    const modules = join(work, 'layer', 'nodejs', 'node_modules');
    if (!existsSync(modules)) stageNativeModules(join(work, 'layer'), 'x86_64');
    expect(readdirSync(join(modules, 'onnxruntime-node', 'bin', 'napi-v6'))).toEqual(['linux']);
    expect(readdirSync(join(modules, 'onnxruntime-node', 'bin', 'napi-v6', 'linux'))).toEqual(['x64']);
    expect(readdirSync(join(modules, 'usearch', 'prebuilds'))).toEqual(['linux-x64']);
    expect(existsSync(join(modules, '@img', 'sharp-linux-x64'))).toBe(true);
    // OpenCV's wasm build is read from the layer on the first extraction, not parsed with every bundle.
    expect(existsSync(join(modules, '@opencvjs', 'web', 'lib', 'opencv_js.js'))).toBe(true);
    expect(existsSync(join(modules, '@aws-sdk'))).toBe(false);
    expect(existsSync(join(modules, 'adm-zip'))).toBe(false);
  });
});
