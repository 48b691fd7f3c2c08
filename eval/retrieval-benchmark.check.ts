/**
 * Determinism of the benchmark build on synthetic inputs (no Debian download): the same seed gives
 * byte-identical catalogue and query images and the same boxes; another seed gives other queries.
 * Run: `npx tsx --test eval/retrieval-benchmark.check.ts`
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import sharp from 'sharp';
import { makeQuery, packshot, seededRandom, trimmedRgba } from './retrieval-benchmark.ts';

const directory = mkdtempSync(join(tmpdir(), 'eval-determinism-'));
after(() => rmSync(directory, { recursive: true, force: true }));

const sha = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

async function syntheticInputs(): Promise<{ stamps: Buffer[]; backgrounds: string[] }> {
  const stamps = await Promise.all(
    ['#d22', '#2a4', '#24c'].map((fill, i) =>
      sharp(
        Buffer.from(
          `<svg xmlns="http://www.w3.org/2000/svg" width="120" height="100">` +
            `<ellipse cx="60" cy="50" rx="${30 + 8 * i}" ry="${20 + 5 * i}" fill="${fill}"/>` +
            `<rect x="50" y="20" width="${10 + 6 * i}" height="30" fill="#fc0"/></svg>`,
        ),
      )
        .png()
        .toBuffer(),
    ),
  );
  const backgrounds = await Promise.all(
    [0, 1].map(async (i) => {
      const path = join(directory, `background-${i}.png`);
      const svg =
        `<svg xmlns="http://www.w3.org/2000/svg" width="1280" height="960">` +
        `<defs><linearGradient id="g"><stop offset="0" stop-color="${i ? '#345' : '#8a6'}"/>` +
        `<stop offset="1" stop-color="${i ? '#c96' : '#246'}"/></linearGradient></defs>` +
        `<rect width="1280" height="960" fill="url(#g)"/><circle cx="400" cy="300" r="200" fill="#eee"/></svg>`;
      writeFileSync(path, await sharp(Buffer.from(svg)).png().toBuffer());
      return path;
    }),
  );
  return { stamps, backgrounds };
}

async function build(seed: number): Promise<string[]> {
  const { stamps, backgrounds } = await syntheticInputs();
  const random = seededRandom(seed);
  const fingerprints: string[] = [];
  for (const bytes of stamps) {
    const stamp = await trimmedRgba(bytes);
    const query = await makeQuery(stamp, backgrounds, random);
    fingerprints.push(
      `${sha(await packshot(stamp))} ${sha(query.bytes)} ${query.kind} ${query.box.join(',')} ${query.mirrored}`,
    );
  }
  return fingerprints;
}

test('seededRandom is reproducible', () => {
  const a = seededRandom(42);
  const b = seededRandom(42);
  const c = seededRandom(43);
  const first = Array.from({ length: 5 }, () => a());
  assert.deepEqual(
    first,
    Array.from({ length: 5 }, () => b()),
  );
  assert.notDeepEqual(
    first,
    Array.from({ length: 5 }, () => c()),
  );
});

test('same seed gives identical images and boxes; another seed does not', async () => {
  const once = await build(1);
  const twice = await build(1);
  assert.deepEqual(twice, once);
  const other = await build(2);
  assert.notDeepEqual(
    other.map((line) => line.split(' ')[1]),
    once.map((line) => line.split(' ')[1]),
  );
  // The catalogue packshot does not depend on the seed.
  assert.deepEqual(
    other.map((line) => line.split(' ')[0]),
    once.map((line) => line.split(' ')[0]),
  );
});
