import { readFile } from 'node:fs/promises';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * Products showing one photo ("twins", twinsOf in lib/domain/search.ts, docs/api.md "Ordering") over real
 * HTTP with the real models, the local usearch index and ORB verification, in the default configuration
 * but for the score cut-off (off, so that the unverified distractors are listed too) and a verification
 * shortlist of 2 (RERANK_TOP_N). Its walk past copies of one photo (globalTopOf) reaches 8 groups, fewer
 * than the 15 showing the multimeter photo (11 under the black filter): the walk ranks the first ones by
 * the one it verifies, the twin lookup the ones past it (with RERANK_TOP_N 10 the walk reaches all of
 * them). Without either, the ones past the shortlist scored as unverified (~0.5).
 */
let stack: TestStack;
let shop: { feedId: string; searchId: string };

const PHOTO = 'tools-multimeter2';
/** Fourteen products without item_group_id showing the photo; three of them red, the rest black. */
const SEPARATE = Array.from({ length: 14 }, (_, i) => `meter-${String(i + 1).padStart(2, '0')}`);
const RED = new Set(['meter-03', 'meter-07', 'meter-11']);
/** One item group of four sizes showing the photo; its id sorts after every separate one's. */
const GROUP = 'zz-meter';
const SIZES = ['S', 'M', 'L', 'XL'];
const DISTRACTORS = [
  'tools-hammer3',
  'tools-plier1',
  'tools-wrench1',
  'others-pan',
  'others-volleyball',
  'others-bucket',
];

interface Result {
  product_id: string;
  item_group_id: string;
  score: number;
  color: string;
  variant_count: number;
}

const call = async (
  path: string,
  body: Record<string, unknown>,
  searchId = shop.searchId,
): Promise<Result[]> => {
  const response = await stack.call('POST', path, {
    body,
    headers: { authorization: `Bearer ${searchId}` },
  });
  expect(response.status).toBe(200);
  return response.body;
};

const link = (name: string) => `${stack.url}/demo/images/${name}.webp`;

/** A new feed with `products` imported (JSON), and its search id. */
async function createShop(name: string, products: Record<string, unknown>[]) {
  const feed = await stack.admin('POST', '/admin/v1/feeds', { name, plan: 'pro' });
  const key = await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/keys`, { name: 'web' });
  const started = await stack.admin('POST', `/admin/v1/feeds/${feed.body.feedId}/imports`, {
    format: 'json',
    content: JSON.stringify(products),
  });
  await stack.importsIdle();
  const finished = await stack.admin(
    'GET',
    `/admin/v1/feeds/${feed.body.feedId}/imports/${started.body.importId}`,
  );
  expect(finished.body).toMatchObject({ status: 'succeeded', embedded: products.length, failed: 0 });
  return { feedId: feed.body.feedId as string, searchId: key.body.searchId as string };
}

/**
 * Runs `act` and returns what it answered with the groups the twin lookup found (the batched k-NN that
 * leaves groups out: image search asks no other, related products ask their main k-NN one by one), that
 * is the groups showing a verified group's photo without being verified themselves.
 */
async function withTwinLookups<T>(act: () => Promise<T>): Promise<{ answer: T; twins: string[] }> {
  const index = await stack.container.vectors();
  const searchMany = vi.spyOn(index, 'searchMany');
  try {
    const answer = await act();
    const twins = new Set<string>();
    for (const [i, [queries]] of searchMany.mock.calls.entries()) {
      const lists = (await searchMany.mock.results[i]!.value) as Awaited<ReturnType<typeof index.searchMany>>;
      queries.forEach((query, q) => {
        if (!query.excludeItemGroupIds?.length) return;
        for (const hit of lists[q] ?? []) if (hit.similarity >= 1 - 1e-5) twins.add(hit.itemGroupId);
      });
    }
    return { answer, twins: [...twins].sort() };
  } finally {
    searchMany.mockRestore();
  }
}

/** Demo photos pasted into a real photo brought to 1000 px: each at its width, angle and place. */
async function scene(items: { name: string; width: number; angle: number; left: number; top: number }[]) {
  const inputs = await Promise.all(
    items.map(async ({ name, width, angle, left, top }) => ({
      input: await sharp(await readFile(new URL(`../../demo/images/${name}.webp`, import.meta.url)))
        .flatten({ background: '#ffffff' })
        .resize({ width })
        .rotate(angle, { background: '#ffffff' })
        .png()
        .toBuffer(),
      left,
      top,
    })),
  );
  return sharp(await readFile(new URL('../fixtures/vision/voc-dinner.jpg', import.meta.url)))
    .resize({ width: 1000 })
    .composite(inputs)
    .jpeg({ quality: 80 })
    .toBuffer();
}

const showsPhoto = (r: Result) => r.item_group_id === GROUP || SEPARATE.includes(r.item_group_id);

beforeAll(async () => {
  stack = await startTestStack({ DEMO_SEED: 'false', MIN_SCORE: '0', RERANK_TOP_N: '2' });
  shop = await createShop('Shared photo', [
    ...SEPARATE.map((id) => ({
      product_id: id,
      title: `Multimeter ${id}`,
      image_link: link(PHOTO),
      color: RED.has(id) ? 'red' : 'black',
    })),
    ...SIZES.map((size) => ({
      product_id: `${GROUP}-${size}`,
      item_group_id: GROUP,
      title: 'Multimeter',
      size,
      image_link: link(PHOTO),
      color: 'black',
    })),
    ...DISTRACTORS.map((name) => ({ product_id: name, title: name, image_link: link(name), color: 'black' })),
  ]);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

describe('products showing the same photo (twins)', () => {
  let query: string;
  let full: Result[];

  beforeAll(async () => {
    // Verified, but not at a score of 1 (0.98): equal scores are then the same evidence, not a ceiling
    const photo = await scene([{ name: PHOTO, width: 300, angle: 8, left: 500, top: 150 }]);
    query = photo.toString('base64');
  });

  it('ranks every product showing the photo found in a real scene alike, above the distractors', async () => {
    // Act
    const { answer, twins } = await withTwinLookups(() =>
      call('/api/v1/search/image', { imageData: query, limit: 50 }),
    );
    full = answer;
    // Assess: 14 separate products and the group once, all with the first result's (verified) score
    const [first] = full;
    expect(first!.score).toBeGreaterThan(0.9);
    expect(first!.score).toBeLessThan(1);
    const shown = full.filter(showsPhoto);
    expect(shown.map((r) => r.item_group_id).sort()).toEqual([...SEPARATE, GROUP]);
    expect(shown.map((r) => r.score)).toEqual(shown.map(() => first!.score));
    expect(full.find((r) => r.item_group_id === GROUP)?.variant_count).toBe(SIZES.length);
    // ...then the six distractors, unverified, all under them
    expect(
      full
        .slice(shown.length)
        .map((r) => r.item_group_id)
        .sort(),
    ).toEqual([...DISTRACTORS].sort());
    expect(Math.max(...full.slice(shown.length).map((r) => r.score))).toBeLessThan(0.5);
    // The twin lookup, not the shortlist, ranked some of them (the case it exists for)
    expect(twins.length).toBeGreaterThan(0);
    expect(twins).toContain(GROUP);
  });

  it('pages of 1 to 4 results are slices of that list, scores included', async () => {
    const pages: { limit: number; offset: number }[] = [];
    for (let limit = 1; limit <= 4; limit += 1)
      for (let offset = 0; offset < full.length; offset += limit) pages.push({ limit, offset });
    // Act: one after the other (the server verifies each; concurrent requests only queue on 2 cores)
    const answers: Result[][] = [];
    for (const page of pages) answers.push(await call('/api/v1/search/image', { imageData: query, ...page }));
    // Assess
    const brief = (results: Result[]) => results.map((r) => [r.item_group_id, r.product_id, r.score]);
    pages.forEach(({ limit, offset }, i) => {
      expect(brief(answers[i]!), `limit ${limit} offset ${offset}`).toEqual(
        brief(full.slice(offset, offset + limit)),
      );
    });
  });

  it('relates the other products showing the photo first, alike, leaving the reference’s group out', async () => {
    // Act
    const { answer: related, twins } = await withTwinLookups(() =>
      call('/api/v1/related', { productId: `${GROUP}-M`, limit: 50 }),
    );
    // Assess
    expect(related.map((r) => r.item_group_id)).not.toContain(GROUP);
    const shown = related.slice(0, SEPARATE.length);
    expect(shown.map((r) => r.item_group_id).sort()).toEqual(SEPARATE);
    expect(shown.map((r) => r.score)).toEqual(shown.map(() => related[0]!.score));
    expect(related[0]!.score).toBeGreaterThan(0.9);
    expect(
      related
        .slice(SEPARATE.length)
        .map((r) => r.item_group_id)
        .sort(),
    ).toEqual([...DISTRACTORS].sort());
    expect(Math.max(...related.slice(SEPARATE.length).map((r) => r.score))).toBeLessThan(0.5);
    expect(twins.length).toBeGreaterThan(0);
  });

  it('keeps the products a related query’s filters exclude out, twins of a verified one included', async () => {
    // Act
    const { answer: related, twins } = await withTwinLookups(() =>
      call('/api/v1/related', {
        productId: `${GROUP}-M`,
        limit: 50,
        filters: [{ key: 'color', value: 'black' }],
      }),
    );
    // Assess: the red ones never appear, the black ones lead alike
    const black = SEPARATE.filter((id) => !RED.has(id));
    expect(related.filter((r) => r.color !== 'black')).toEqual([]);
    expect(related.map((r) => r.item_group_id).filter((id) => RED.has(id))).toEqual([]);
    const shown = related.slice(0, black.length);
    expect(shown.map((r) => r.item_group_id).sort()).toEqual(black);
    expect(shown.map((r) => r.score)).toEqual(shown.map(() => related[0]!.score));
    expect(
      related
        .slice(black.length)
        .map((r) => r.item_group_id)
        .sort(),
    ).toEqual([...DISTRACTORS].sort());
    // The twin lookup ran under the filter: it found black ones only
    expect(twins.length).toBeGreaterThan(0);
    expect(twins.filter((id) => RED.has(id))).toEqual([]);
  });
});

describe('a second photo verified in the same scene', () => {
  /** Six products showing the multimeter photo, twelve showing the pliers photo, three distractors. */
  const METERS = Array.from({ length: 6 }, (_, i) => `meter-${i + 1}`);
  const PLIERS = Array.from({ length: 12 }, (_, i) => `pliers-${String(i + 1).padStart(2, '0')}`);
  let two: { feedId: string; searchId: string };

  beforeAll(async () => {
    two = await createShop('Two shared photos', [
      ...METERS.map((id) => ({ product_id: id, title: 'Multimeter', image_link: link(PHOTO) })),
      ...PLIERS.map((id) => ({ product_id: id, title: 'Pliers', image_link: link('tools-plier2') })),
      ...DISTRACTORS.slice(3).map((name) => ({ product_id: name, title: name, image_link: link(name) })),
    ]);
  }, 60_000);

  it('ranks every product showing the less verified photo alike too', async () => {
    // Prepare: the multimeter large (70–90 inliers), the pliers smaller (30–35): the six multimeter
    // groups are the best verified ones, and only the first four pliers groups are verified directly.
    // The twin lookup's five sources are the five best verified groups, all showing the multimeter,
    // so the pliers photo gets no lookup and pliers-05…12 scored 0.008163 beside 0.999849
    const photo = await scene([
      { name: PHOTO, width: 400, angle: 0, left: 600, top: 150 },
      { name: 'tools-plier2', width: 200, angle: 0, left: 50, top: 250 },
    ]);
    // Act
    const results = await call(
      '/api/v1/search/image',
      { imageData: photo.toString('base64'), limit: 50 },
      two.searchId,
    );
    // Assess: every product showing the pliers photo has the verified one's score
    const pliers = results.filter((r) => PLIERS.includes(r.item_group_id));
    expect(pliers).toHaveLength(PLIERS.length);
    expect(pliers[0]!.score).toBeGreaterThan(0.9);
    expect(pliers.map((r) => [r.item_group_id, r.score])).toEqual(
      pliers.map((r) => [r.item_group_id, pliers[0]!.score]),
    );
  });
});
