import { readFile } from 'node:fs/promises';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * Re-ranking and the score cut-off over real HTTP with the default configuration: the demo catalogue
 * (29 CC0 product photos) is imported at start (local features stored with it); queries are a catalogue
 * photo pasted into a real scene and real photos with no catalogue product in them (MIT test fixtures).
 */
let stack: TestStack;
const fixture = (path: string) => readFile(new URL(`../${path}`, import.meta.url));
const UNRELATED = [
  'fixtures/vision/voc-dinner.jpg',
  'integration/local-features/fixtures/middlebury-grove3.jpg',
];

const search = (imageData: Buffer, limit = 10) =>
  stack.call('POST', '/api/v1/search/image', {
    body: { imageData: imageData.toString('base64'), limit },
    headers: { authorization: `Bearer ${stack.demo.searchId}` },
  });

beforeAll(async () => {
  stack = await startTestStack();
  await stack.importsIdle();
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

describe('search quality (default configuration)', () => {
  it('stores local features for every demo product at import', async () => {
    expect(await stack.container.objects.list('features/')).toHaveLength(29);
  });

  it.each(UNRELATED)('returns nothing for an unrelated real photo (%s)', async (path) => {
    // Act
    const response = await search(await fixture(path));
    // Assess
    expect(response.status).toBe(200);
    expect(response.body).toEqual([]);
  });

  it('finds a catalogue product pasted into a real photo first, with a verified score', async () => {
    // Prepare: the multimeter photo, rotated, at 30 % of the width of the dinner photo
    const background = sharp(await fixture('fixtures/vision/voc-dinner.jpg')).resize({ width: 1000 });
    const multimeter = await sharp(
      await readFile(new URL('../../demo/images/tools-multimeter2.webp', import.meta.url)),
    )
      .flatten({ background: '#ffffff' })
      .resize({ width: 300 })
      .rotate(8, { background: '#ffffff' })
      .png()
      .toBuffer();
    const scene = await background
      .composite([{ input: multimeter, left: 500, top: 150 }])
      .jpeg({ quality: 80 })
      .toBuffer();
    // Act
    const response = await search(scene);
    // Assess
    expect(response.status).toBe(200);
    expect(response.body[0]).toMatchObject({ item_group_id: 'multimeter' });
    expect(response.body[0].score).toBeGreaterThan(0.9);
    const scores = response.body.map((p: { score: number }) => p.score);
    expect(scores.every((s: number) => s >= stack.config.search.minScore)).toBe(true);
  });

  it('deletes a feed’s stored features with the feed', async () => {
    const deleted = await stack.admin('DELETE', `/admin/v1/feeds/${stack.demo.feedId}`);
    expect(deleted.status).toBe(204);
    expect(await stack.container.objects.list('features/')).toEqual([]);
  });
});
