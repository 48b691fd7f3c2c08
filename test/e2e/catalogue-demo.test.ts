import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { tryBanner, tryCommand } from '#lib/local/banner.ts';
import { type LocalStack, startLocalStack } from '#lib/local/stack.ts';

/** `npm start`'s demo feed: seeded from the committed CC0 catalogue, and cheap to re-seed on a restart. */
let dataDir: string | undefined;

afterAll(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function demoImports(stack: LocalStack) {
  const response = await fetch(`${stack.url}/admin/v1/feeds/demo/imports`, {
    headers: { authorization: `Bearer ${stack.adminToken}` },
  });
  return ((await response.json()) as { imports: unknown }).imports as {
    status: string;
    total: number;
    embedded: number;
    skipped: number;
    failed: number;
  }[];
}

describe('demo catalogue', () => {
  it('is searchable after start and re-seeds without embedding anything on a restart', async () => {
    // Prepare: the same port both times, as `npm start` uses, so the demo's image links stay the same.
    dataDir = await mkdtemp(join(tmpdir(), 'vps-demo-'));
    const env = { ...process.env, LOG_LEVEL: 'silent', PORT: String(await freePort()), DATA_DIR: dataDir };
    const first = await startLocalStack(env);
    let firstImports;
    try {
      // The search `npm start` prints once the demo feed is seeded runs as printed, at once, and finds
      // the photo's product (printed with the rest, it answered [] while the demo was importing)
      expect(await first.demoSeeded()).toBe(true);
      const printed = tryBanner(first);
      const command = printed.slice(printed.indexOf(tryCommand(first)[0]!));
      const { stdout } = await promisify(execFile)('sh', ['-c', command]);
      expect((JSON.parse(stdout) as { product_id: string }[])[0]?.product_id).toBe('hammer-claw');
      await first.importsIdle();
      firstImports = await demoImports(first);
      // Act: search the demo feed with one of its own photos.
      const photo = await readFile(new URL('../../demo/images/tools-multimeter2.webp', import.meta.url));
      const response = await fetch(`${first.url}/api/v1/search/image`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${first.demo.searchId}` },
        body: JSON.stringify({ imageData: photo.toString('base64'), limit: 3 }),
      });
      const results = (await response.json()) as { product_id: string }[];
      // Assess
      expect(results[0]).toMatchObject({
        product_id: 'multimeter',
        image_link: `${first.url}/demo/images/tools-multimeter2.webp`,
      });
    } finally {
      await first.close();
    }
    expect(firstImports[0]).toMatchObject({ status: 'succeeded', total: 29, embedded: 29, failed: 0 });

    const second = await startLocalStack(env);
    try {
      await second.importsIdle();
      expect((await demoImports(second))[0]).toMatchObject({
        status: 'succeeded',
        total: 29,
        embedded: 0,
        skipped: 29,
      });
    } finally {
      await second.close();
    }
  });
});
