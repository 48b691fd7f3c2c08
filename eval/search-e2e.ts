/**
 * End-to-end search measurement on the demo catalogue (29 CC0 product photos, demo/images), through the
 * real use case (`searchByImage`) over the local stack: real models, local vector index, features stored
 * by the real import. Not the project benchmark (eval/ retrieval benchmark): a small, reproducible check
 * of what re-ranking and the score cut-off do, with queries made from the catalogue's own photos.
 *
 * Queries per catalogue item (seeded, deterministic):
 * - flat/crop: centre crop of 70 %, JPEG q60;
 * - flat/rotate: rotated 12° on white, 400 px wide, JPEG q70;
 * - scene/paste: the photo at 30 % of a background photo's width, rotated 8°, pasted on one of three real
 *   photos (test fixtures, MIT), 1000 px wide, JPEG q80;
 * - scene/paste-mirror: mirrored, at 20 % of the width, pasted elsewhere.
 * Unrelated queries (no catalogue item in them): the three background photos, their mirrors and their
 * four quadrants (18 images).
 *
 * Pipelines: global only (k-NN order, calibrated score without verification), + geometric re-ranking
 * of the top 20, + the keypoint shortlist (visual words, top 20), the default (global top 10 + keypoint
 * top 10), and with the query's global similarity = max(whole image, NanoDet's top box). Prints R@1 and R@10 (item groups), median ms per query, the share of true top-1 matches
 * scoring ≥ MIN_SCORE, the best score over the unrelated photos, and a sweep of cut-offs: true top-1
 * matches kept vs unrelated photos that still return something.
 *
 * Run: `npx tsx eval/search-e2e.ts` (DEMO_SEED imports the demo feed into a temp folder first).
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { searchByImage, type SearchDeps } from '#lib/domain/search.ts';
import { startLocalStack } from '#lib/local/stack.ts';

const root = new URL('..', import.meta.url).pathname;
const BACKGROUNDS = [
  'test/fixtures/vision/voc-dinner.jpg',
  'test/integration/local-features/fixtures/middlebury-grove3.jpg',
  'test/integration/local-features/fixtures/arc2017-shelf.jpg',
];

async function paste(item: Buffer, background: Buffer, share: number, at: [number, number], mirror: boolean) {
  const bg = sharp(background).resize({ width: 1000 });
  const { width, height } = await bg
    .clone()
    .metadata()
    .then(async () => {
      const info = await bg.clone().toBuffer({ resolveWithObject: true });
      return info.info;
    });
  let product = sharp(item).flatten({ background: '#ffffff' });
  if (mirror) product = product.flop();
  const piece = await product
    .resize({ width: Math.round(width * share) })
    .rotate(8, { background: '#ffffff' })
    .png()
    .toBuffer({ resolveWithObject: true });
  const left = Math.min(width - piece.info.width, Math.round(width * at[0]));
  const top = Math.max(0, Math.min(height - piece.info.height, Math.round(height * at[1])));
  return bg
    .composite([{ input: piece.data, left, top }])
    .jpeg({ quality: 80 })
    .toBuffer();
}

async function queriesOf(item: Buffer, index: number, backgrounds: Buffer[]) {
  const meta = await sharp(item).metadata();
  const w = meta.width ?? 1;
  const h = meta.height ?? 1;
  const crop = await sharp(item)
    .extract({
      left: Math.round(w * 0.15),
      top: Math.round(h * 0.15),
      width: Math.round(w * 0.7),
      height: Math.round(h * 0.7),
    })
    .flatten({ background: '#ffffff' })
    .jpeg({ quality: 60 })
    .toBuffer();
  const rotate = await sharp(item)
    .flatten({ background: '#ffffff' })
    .rotate(12, { background: '#ffffff' })
    .resize({ width: 400 })
    .jpeg({ quality: 70 })
    .toBuffer();
  const bg = backgrounds[index % backgrounds.length]!;
  const bg2 = backgrounds[(index + 1) % backgrounds.length]!;
  return [
    { kind: 'flat', name: 'crop', image: crop },
    { kind: 'flat', name: 'rotate', image: rotate },
    {
      kind: 'scene',
      name: 'paste',
      image: await paste(item, bg, 0.3, [0.1 + (index % 5) * 0.12, 0.3], false),
    },
    { kind: 'scene', name: 'paste-mirror', image: await paste(item, bg2, 0.2, [0.6, 0.5], true) },
  ];
}

async function unrelatedOf(background: Buffer): Promise<Buffer[]> {
  const { info } = await sharp(background).toBuffer({ resolveWithObject: true });
  const half = { width: Math.floor(info.width / 2), height: Math.floor(info.height / 2) };
  const quadrants = await Promise.all(
    [
      [0, 0],
      [1, 0],
      [0, 1],
      [1, 1],
    ].map(([x, y]) =>
      sharp(background)
        .extract({ left: x! * half.width, top: y! * half.height, ...half })
        .jpeg({ quality: 85 })
        .toBuffer(),
    ),
  );
  return [background, await sharp(background).flop().jpeg({ quality: 85 }).toBuffer(), ...quadrants];
}

const CUTOFFS = [0.2, 0.25, 0.3, 0.35, 0.4, 0.5];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

async function main() {
  const dataDir = await mkdtemp(join(tmpdir(), 'vps-eval-'));
  const stack = await startLocalStack({ ...process.env, LOG_LEVEL: 'silent', PORT: '0', DATA_DIR: dataDir });
  try {
    await stack.importsIdle();
    const c = stack.container;
    const feedId = stack.demo.feedId;
    const { items } = await c.products.page(feedId, 100);
    const backgrounds = await Promise.all(BACKGROUNDS.map((p) => readFile(join(root, p))));
    const files = (await readdir(join(root, 'demo/images'))).filter((f) => f.endsWith('.webp')).sort();
    const stored = (await c.objects.list('features/')).length;
    console.log(`catalogue: ${items.length} products, ${files.length} photos, ${stored} feature records`);
    const queries: { kind: string; name: string; image: Buffer; group: string }[] = [];
    for (const [i, file] of files.entries()) {
      const product = items.find((p) => p.image_link.endsWith(`/${file}`));
      if (!product) continue;
      const photo = await readFile(join(root, 'demo/images', file));
      for (const q of await queriesOf(photo, i, backgrounds)) queries.push({ ...q, group: product.group });
    }
    const unrelatedQueries = (await Promise.all(backgrounds.map(unrelatedOf))).flat();
    const minScore = c.config.search.minScore;
    const reranked = (topN: number, wordTopN: number) => c.reranking && { ...c.reranking, topN, wordTopN };
    // Every row but the default switches regional matching off, so each adds or swaps one stage.
    const base = { ...c, regional: undefined, minScore: 0 };
    const pipelines: [string, SearchDeps][] = [
      ['global only', { ...base, reranking: undefined }],
      ['+ re-ranking top 20', { ...base, reranking: reranked(20, 0) }],
      ['+ keypoint shortlist top 20', { ...base, reranking: reranked(20, 20) }],
      ['global top 10 + keypoint shortlist top 10', { ...base, reranking: reranked(10, 10) }],
      [
        '+ regional shortlist top 30 and regional evidence (default)',
        { ...base, regional: { topN: 30 }, reranking: reranked(10, 10) },
      ],
      ['global, max(whole, detector crop)', { ...base, reranking: undefined, detectorCrop: true }],
      [
        'max(whole, detector crop) + re-ranking + keypoint shortlist',
        { ...base, detectorCrop: true, reranking: reranked(10, 10) },
      ],
    ];
    // Warm-up: models, OpenCV, feature cache.
    for (const [, deps] of pipelines)
      for (const q of queries.slice(0, 4))
        await searchByImage(deps, { feedId, image: q.image, limit: 10, offset: 0 });
    console.log(
      `queries: ${queries.length} (${queries.filter((q) => q.kind === 'scene').length} scene); MIN_SCORE ${minScore}`,
    );
    console.log(
      '| pipeline | R@1 all | R@10 all | R@1 flat | R@10 flat | R@1 scene | R@10 scene | true top-1 with score ≥ MIN_SCORE | median ms/query | unrelated photos (18): best top score |',
    );
    console.log('|---|---|---|---|---|---|---|---|---|---|');
    const sweeps: string[] = [];
    for (const [label, deps] of pipelines) {
      const ranks: { kind: string; rank: number; topScore: number }[] = [];
      const times: number[] = [];
      for (const q of queries) {
        const started = performance.now();
        const hits = await searchByImage(deps, { feedId, image: q.image, limit: 10, offset: 0 });
        times.push(performance.now() - started);
        ranks.push({
          kind: q.kind,
          rank: hits.findIndex((h) => h.product.group === q.group),
          topScore: hits[0]?.score ?? 0,
        });
      }
      const unrelated: number[] = [];
      for (const image of unrelatedQueries) {
        const hits = await searchByImage(deps, { feedId, image, limit: 10, offset: 0 });
        unrelated.push(hits[0]?.score ?? 0);
      }
      const recall = (kind: string | undefined, k: number) => {
        const subset = ranks.filter((r) => !kind || r.kind === kind);
        return (subset.filter((r) => r.rank >= 0 && r.rank < k).length / subset.length).toFixed(2);
      };
      const kept = ranks.filter((r) => r.rank === 0 && r.topScore >= minScore).length;
      const top1 = ranks.filter((r) => r.rank === 0).length;
      console.log(
        `| ${label} | ${recall(undefined, 1)} | ${recall(undefined, 10)} | ${recall('flat', 1)} | ${recall('flat', 10)} | ${recall('scene', 1)} | ${recall('scene', 10)} | ${kept}/${top1} | ${median(times).toFixed(1)} | ${Math.max(...unrelated).toFixed(3)} (median ${median(unrelated).toFixed(3)}) |`,
      );
      sweeps.push(
        `| ${label} | ` +
          CUTOFFS.map(
            (cut) =>
              `${ranks.filter((r) => r.rank === 0 && r.topScore >= cut).length}/${top1} · ${unrelated.filter((u) => u >= cut).length}/${unrelated.length}`,
          ).join(' | ') +
          ' |',
      );
    }
    console.log('\ncut-off sweep: true top-1 matches kept · unrelated photos still answered');
    console.log(`| pipeline | ${CUTOFFS.join(' | ')} |`);
    console.log(`|---|${CUTOFFS.map(() => '---').join('|')}|`);
    for (const line of sweeps) console.log(line);
  } finally {
    await stack.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
