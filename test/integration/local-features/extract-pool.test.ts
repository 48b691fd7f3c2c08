/**
 * ORB extraction on worker threads (lib/vision/local-features/extract-pool.ts, `LOCAL_FEATURE_WORKERS`):
 * real workers, each with its own OpenCV instance, must give exactly what the JS thread gives, keep
 * undecodable input a 4xx error, and never keep a finished process alive. Workers run either the
 * TypeScript entry (through tsx) or local mode's plain-JS bundle of it (lib/local/worker-bundle.ts).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrbLocalFeatureMatcher } from '#lib/adapters/orb-local-feature-matcher.ts';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { bundleExtractionWorker } from '#lib/local/worker-bundle.ts';
import { ExtractionPool } from '#lib/vision/local-features/extract-pool.ts';
import {
  extractLocalFeatures,
  type FeatureSet,
  type LocalFeatures,
  verifyCandidates,
} from '#lib/vision/local-features/index.ts';
import { DINNER, GROVE, SHELF } from './images.ts';

function same(a: FeatureSet | undefined, b: FeatureSet | undefined): void {
  expect(a).toBeDefined();
  expect(b).toBeDefined();
  expect([a!.width, a!.height]).toEqual([b!.width, b!.height]);
  expect(Buffer.from(a!.points.buffer, a!.points.byteOffset, a!.points.byteLength)).toEqual(
    Buffer.from(b!.points.buffer, b!.points.byteOffset, b!.points.byteLength),
  );
  expect(Buffer.from(a!.descriptors.buffer, a!.descriptors.byteOffset, a!.descriptors.byteLength)).toEqual(
    Buffer.from(b!.descriptors.buffer, b!.descriptors.byteOffset, b!.descriptors.byteLength),
  );
}

describe.each([
  ['the TypeScript entry', false],
  ['a bundled entry', true],
])('ExtractionPool on %s', (_, bundled) => {
  let pool: ExtractionPool;
  beforeAll(async () => {
    pool = new ExtractionPool(2, bundled ? await bundleExtractionWorker() : undefined);
  }, 30_000);
  afterAll(() => pool.close());

  it('gives the features the JS thread gives, for queries and catalogue images, concurrently', async () => {
    // Prepare: three photos, each as a query and as a catalogue image (six extractions over two workers)
    const photos = [DINNER, GROVE, SHELF];
    const requests = photos.flatMap((photo) =>
      (['query', 'catalogue'] as const).map((role) => ({ photo, role })),
    );
    // Act
    const fromPool = await Promise.all(requests.map(({ photo, role }) => pool.extract(photo, role)));
    const inThread: LocalFeatures[] = [];
    for (const { photo, role } of requests) inThread.push(await extractLocalFeatures(photo, { role }));
    // Assess
    fromPool.forEach((features, i) => {
      same(features.original, inThread[i]!.original);
      if (requests[i]!.role === 'catalogue') same(features.mirrored, inThread[i]!.mirrored);
      else expect(features.mirrored).toBeUndefined();
    });
    expect(fromPool[0]!.original.points.length).toBeGreaterThan(100);
  }, 60_000);

  it('extracts a region of a query as the JS thread does', async () => {
    // Act
    const box: [number, number, number, number] = [148, 296, 272, 446];
    const fromPool = await pool.extract(SHELF, 'query', box);
    const inThread = await extractLocalFeatures(SHELF, { role: 'query', region: box });
    // Assess
    same(fromPool.original, inThread.original);
    expect([fromPool.original.width, fromPool.original.height]).toEqual([256, 310]);
  }, 60_000);

  it('reports an undecodable image as InvalidImageError and keeps working', async () => {
    await expect(pool.extract(Buffer.from('not an image'), 'query')).rejects.toBeInstanceOf(
      InvalidImageError,
    );
    const features = await pool.extract(DINNER, 'query');
    expect(features.original.points.length).toBeGreaterThan(100);
  }, 30_000);

  it('verifies candidates as the JS thread does, and leaves the caller its features', async () => {
    // Prepare: a query photo against catalogue features of itself, two other photos and a missing one
    const query = await extractLocalFeatures(DINNER, { role: 'query' });
    const candidates = [
      await extractLocalFeatures(DINNER, { role: 'catalogue' }),
      await extractLocalFeatures(GROVE, { role: 'catalogue' }),
      undefined,
      await extractLocalFeatures(SHELF, { role: 'catalogue' }),
    ];
    // Act
    const fromPool = await pool.verify(query, candidates);
    // Assess
    expect(fromPool).toEqual(verifyCandidates(query, candidates).map((v) => v.inliers));
    expect(fromPool[0]).toBeGreaterThan(20);
    expect(fromPool[2]).toBe(0);
    expect(query.original.descriptors.byteLength).toBeGreaterThan(0);
    expect(candidates[0]!.original.descriptors.byteLength).toBeGreaterThan(0);
  }, 60_000);

  it('refuses work once closed', async () => {
    const closing = new ExtractionPool(1);
    await closing.close();
    await expect(closing.extract(DINNER, 'query')).rejects.toThrow(/closed/);
  });
});

describe('ExtractionPool with an entry that cannot start', () => {
  it('stops restarting it after three crashes in a row and fails every extraction at once', async () => {
    // Prepare: a worker entry that throws as it loads, given by a relative path
    const dir = await mkdtemp(join(tmpdir(), 'vps-pool-'));
    const entry = join(dir, 'broken-worker.mjs');
    await writeFile(entry, "throw new Error('cannot load');\n");
    const pool = new ExtractionPool(1, relative(process.cwd(), entry));
    try {
      // Act: ask until the pool gives up (each start fails at once; an extraction sent to a starting
      // worker fails with its crash)
      const errors: string[] = [];
      const deadline = Date.now() + 8000;
      while (!errors.at(-1)?.includes('in a row') && Date.now() < deadline) {
        errors.push(
          await pool.extract(DINNER, 'query').then(
            () => 'features',
            (e: Error) => e.message,
          ),
        );
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
      const started = Date.now();
      const later = await pool.extract(DINNER, 'query').catch((e: Error) => e.message);
      // Assess: every failure is the entry's; the pool stopped, and answers at once
      expect(errors.every((message) => message.includes('cannot load'))).toBe(true);
      expect(errors.at(-1)).toMatch(/crashed 3 times in a row: cannot load/);
      expect(later).toMatch(/crashed 3 times in a row/);
      expect(Date.now() - started).toBeLessThan(100);
    } finally {
      await pool.close();
      await rm(dir, { recursive: true, force: true });
    }
  }, 10_000);
});

describe('ExtractionPool with a worker that stops on its own', () => {
  // A stand-in entry: the first worker to get a request exits (process.exit, no 'error' event), the next
  // one answers every verification with [42]. It is written where the pool can read it, as a bundle is.
  const entrySource = `
    import { existsSync, writeFileSync } from 'node:fs';
    import { parentPort } from 'node:worker_threads';
    const marker = new URL('./exited-once', import.meta.url);
    parentPort.on('message', (request) => {
      if (!existsSync(marker)) { writeFileSync(marker, ''); process.exit(3); }
      parentPort.postMessage({ id: request.id, inliers: [42] });
    });`;
  let dir: string;
  let pool: ExtractionPool;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'vps-pool-'));
    await writeFile(join(dir, 'exiting-worker.mjs'), entrySource);
    pool = new ExtractionPool(1, join(dir, 'exiting-worker.mjs'));
  });
  afterAll(async () => {
    await pool.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('fails what the exiting worker was given and answers from a fresh one', async () => {
    const query = await extractLocalFeatures(SHELF, { role: 'query' });
    // Act
    const first = await pool.verify(query, [query]).catch((e: Error) => e.message);
    const second = await pool.verify(query, [query]);
    // Assess
    expect(first).toBe('the extraction worker exited with code 3');
    expect(second).toEqual([42]);
    expect(pool.hasIdleWorker()).toBe(true);
  }, 10_000);

  it('fails a request it cannot send, and counts it as settled', async () => {
    // Prepare: features whose descriptors were transferred away (a detached buffer cannot be cloned)
    const query = await extractLocalFeatures(SHELF, { role: 'query' });
    const detached = await extractLocalFeatures(SHELF, { role: 'query' });
    structuredClone(detached.original.descriptors.buffer, {
      transfer: [detached.original.descriptors.buffer as ArrayBuffer],
    });
    await pool.verify(query, [query]).catch(() => undefined); // the first worker's exit, if still due
    // Act
    const refused = pool.verify(query, [detached]);
    // Assess: refused at once, and the only worker is idle again
    await expect(refused).rejects.toMatchObject({ name: 'DataCloneError' });
    expect(pool.hasIdleWorker()).toBe(true);
    await expect(pool.verify(query, [query])).resolves.toEqual([42]);
  }, 10_000);
});

describe('bundleExtractionWorker', () => {
  it('names the bundle by its contents: the same sources give the same file, which a pool refuses when gone', async () => {
    // Act
    const [first, second] = await Promise.all([bundleExtractionWorker(), bundleExtractionWorker()]);
    // Assess
    expect(second).toBe(first);
    expect(first).toMatch(/node_modules\/\.cache\/visual-product-search\/extract-worker-[0-9a-f]{16}\.mjs$/);
    expect(() => new ExtractionPool(1, `${first}.missing`)).toThrow(/does not exist/);
  }, 30_000);
});

describe('OrbLocalFeatureMatcher with workers', () => {
  it('lets a finished process exit: an idle worker holds nothing open', async () => {
    // A process that extracts once through a worker and then has nothing left to do must end by itself.
    const matcherModule = join(import.meta.dirname, '../../../lib/adapters/orb-local-feature-matcher.ts');
    const photo = join(import.meta.dirname, 'fixtures/arc2017-shelf.jpg');
    const script = `
      import { readFileSync } from 'node:fs';
      import { OrbLocalFeatureMatcher } from ${JSON.stringify(matcherModule)};
      const features = await new OrbLocalFeatureMatcher({ workers: 1 }).extract(readFileSync(${JSON.stringify(photo)}), 'query');
      console.log(features.original.points.length / 2);`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const started = Date.now();
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill(), 20_000);
      child.on('exit', (exitCode) => {
        clearTimeout(timer);
        resolve(exitCode);
      });
    });
    expect(code).toBe(0);
    expect(Number(output.trim())).toBeGreaterThan(100);
    expect(Date.now() - started).toBeLessThan(20_000);
  }, 30_000);

  it('splits a long shortlist with an idle worker, with the counts the JS thread gives; a busy or closed pool leaves it here', async () => {
    // Prepare: eight candidates, the query's own photo among them
    const matcher = new OrbLocalFeatureMatcher({ workers: 1 });
    const query = await extractLocalFeatures(SHELF, { role: 'query' });
    const photos = [DINNER, GROVE, SHELF, DINNER, GROVE, SHELF, GROVE, DINNER];
    const candidates: (LocalFeatures | undefined)[] = [];
    for (const photo of photos) candidates.push(await extractLocalFeatures(photo, { role: 'catalogue' }));
    const inThread = verifyCandidates(query, candidates).map((v) => v.inliers);
    try {
      // Act
      const split = matcher.verify(query, candidates);
      const short = matcher.verify(query, candidates.slice(0, 3));
      const splitCounts = await split;
      const extracting = matcher.extract(DINNER, 'query');
      const whileBusy = matcher.verify(query, candidates);
      await extracting;
      await matcher.close();
      const afterCloseAnswer = matcher.verify(query, candidates);
      const afterClose = await afterCloseAnswer;
      // Assess: the long shortlist went half to the worker, the short one and the one sent while the
      // worker was extracting stayed on this thread
      expect(split).toBeInstanceOf(Promise);
      expect(Array.isArray(short)).toBe(true);
      expect(Array.isArray(whileBusy)).toBe(true);
      expect(Array.isArray(afterCloseAnswer)).toBe(true);
      expect(splitCounts).toEqual(inThread);
      expect(whileBusy).toEqual(inThread);
      expect(afterClose).toEqual(inThread);
      expect(splitCounts[2]).toBeGreaterThan(20);
    } finally {
      await matcher.close();
    }
  }, 60_000);

  it('extracts on the JS thread with no workers', async () => {
    const matcher = new OrbLocalFeatureMatcher();
    const features = await matcher.extract(DINNER, 'query');
    same(features.original, (await extractLocalFeatures(DINNER, { role: 'query' })).original);
    await matcher.close();
  });
});
