/**
 * `npm run eval:objectron [-- --pipeline]`: MediaPipe Objectron's Open Images detector (converted from
 * TFLite, eval/objectron-detector.ts) against NanoDet, on the project benchmark's scene queries.
 *
 * 1. Checks the conversion on the VOC dinner photo (test/fixtures/vision): the person, chair and table
 *    the model knows must be found where the annotation has them (IoU ≥ 0.5), or the script fails.
 * 2. Box coverage: for how many scene queries one of each detector's first 1 / 2 / 3 boxes (score ≥ 0.05,
 *    none over half the photo: what the second look uses) holds the pasted product (IoU ≥ 0.5).
 * 3. With `--pipeline`: the full pipeline's second look with NanoDet's boxes, Objectron's, and both
 *    (eval/pipeline.ts), and the coverage on the queries the default pipeline misses at 10.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { DetectedObject, Detector, PixelBox } from '#lib/ports.ts';
import { openImage } from '#lib/vision/image-input.ts';
import { loadVision } from '#lib/vision/load-vision.ts';
import { intersectionOverUnion } from '#lib/vision/nanodet-decode.ts';
import { ensureEvalData } from './fetch-data.ts';
import { objectronDetector } from './objectron-detector.ts';
import { defaultVariants, evaluatePipelines, withSecondLook } from './pipeline.ts';
import { loadRetrievalBenchmark } from './retrieval-benchmark.ts';

const ROOT = join(import.meta.dirname, '..');
const LOOK_SCORE = 0.05;
const MAX_AREA = 0.5;
const BOXES = 3;

const { values: flags } = parseArgs({ options: { pipeline: { type: 'boolean', default: false } } });

/** The boxes the second look would take: the most confident first, none covering over half the photo. */
function lookBoxes(objects: readonly DetectedObject[], width: number, height: number): PixelBox[] {
  return objects
    .map(({ box }) => box)
    .filter(([x0, y0, x1, y1]) => (x1 - x0) * (y1 - y0) <= MAX_AREA * width * height);
}

/** NanoDet's first `first` look boxes, then `extra` of Objectron's that overlap none of them. */
function combined(nanodet: Detector, objectron: Detector, first: number, extra: number): Detector {
  return {
    async detect(image, options) {
      const [mine, theirs] = await Promise.all([
        nanodet.detect(image, options),
        objectron.detect(image, options),
      ]);
      const { width, height } = await sizeOf(image);
      const kept = lookBoxes(mine, width, height).slice(0, first);
      const added = lookBoxes(theirs, width, height)
        .filter((box) => kept.every((other) => intersectionOverUnion(box, other) < 0.5))
        .slice(0, extra);
      return [...kept, ...added].map((box) => ({ box, label: 'object', score: 1 }));
    },
  };
}

async function sizeOf(image: Buffer): Promise<{ width: number; height: number }> {
  const { width, height } = await openImage(image);
  return { width, height };
}

async function checkConversion(objectron: Detector): Promise<void> {
  const directory = join(ROOT, 'test/fixtures/vision');
  const truth = JSON.parse(readFileSync(join(directory, 'voc-dinner.boxes.json'), 'utf8')) as {
    label: string;
    box: PixelBox;
  }[];
  const found = await objectron.detect(readFileSync(join(directory, 'voc-dinner.jpg')));
  for (const [ours, theirs] of [
    ['Person', 'person'],
    ['Chair', 'chair'],
    ['Table', 'dining table'],
  ] as const) {
    const best = found.find((object) => object.label === ours);
    const overlap = best
      ? Math.max(
          ...truth.filter((t) => t.label === theirs).map((t) => intersectionOverUnion(best.box, t.box)),
        )
      : 0;
    console.log(
      `objectron: VOC dinner photo, first ${ours} ${best ? `score ${best.score.toFixed(2)}` : 'missing'}, best IoU with a ${theirs} ${overlap.toFixed(2)}`,
    );
    if (overlap < 0.5)
      throw new Error(`the converted detector does not find the ${theirs} (IoU ${overlap.toFixed(2)})`);
  }
}

async function main(): Promise<void> {
  ensureEvalData();
  const benchmark = await loadRetrievalBenchmark(1);
  const objectron = await objectronDetector(ROOT);
  await checkConversion(objectron);
  const { detector: nanodet } = await loadVision(join(ROOT, 'layers/models/build'));
  const covered: Record<string, Map<number, number>> = { nanodet: new Map(), objectron: new Map() };
  let nanodetMs = 0;
  let objectronMs = 0;
  objectron.modelMs = 0;
  objectron.runs = 0;
  const scene = benchmark.queries.filter((query) => query.kind === 'scene');
  for (const query of scene) {
    const image = readFileSync(join(benchmark.directory, query.file));
    const { width, height } = await sizeOf(image);
    const started = performance.now();
    const mine = await nanodet.detect(image, { scoreThreshold: LOOK_SCORE });
    nanodetMs += performance.now() - started;
    const between = performance.now();
    const theirs = await objectron.detect(image, { scoreThreshold: LOOK_SCORE });
    objectronMs += performance.now() - between;
    for (const [name, objects] of [
      ['nanodet', mine],
      ['objectron', theirs],
    ] as const) {
      // The first rank (1-based) at which a look box holds the product; none in the first BOXES: absent.
      const rank = lookBoxes(objects, width, height)
        .slice(0, BOXES)
        .findIndex((box) => intersectionOverUnion(box, query.box as PixelBox) >= 0.5);
      if (rank >= 0) covered[name]!.set(query.id, rank + 1);
    }
  }
  const tally = (ids: readonly number[]) => {
    const row = (name: string) =>
      [1, 2, 3].map((k) => ids.filter((id) => (covered[name]!.get(id) ?? Infinity) <= k).length).join(' / ');
    const either = ids.filter((id) => covered['nanodet']!.has(id) || covered['objectron']!.has(id)).length;
    return `NanoDet ${row('nanodet')}, Objectron ${row('objectron')}, either (first 3 of each) ${either}`;
  };
  console.log(
    `objectron: ${scene.length} scene queries, a look box holding the product in the first 1 / 2 / 3: ${tally(scene.map((q) => q.id))}`,
  );
  const perPhoto = (ms: number) => `${(ms / scene.length).toFixed(1)} ms`;
  console.log(
    `objectron: time per photo (decode and resize, model, decoding, NMS): NanoDet ${perPhoto(nanodetMs)}, Objectron ${perPhoto(objectronMs)} (its model alone ${(objectron.modelMs / objectron.runs).toFixed(1)} ms)`,
  );
  if (!flags.pipeline) return;

  const objectronLook = { name: 'Objectron', of: async () => objectron };
  const both = (first: number, extra: number) => ({
    name: `NanoDet ${first} + Objectron ${extra}`,
    of: async () => combined(nanodet, objectron, first, extra),
  });
  const variants = [
    ...defaultVariants(true).filter(({ name }) => name.includes('(default)')),
    withSecondLook(BOXES),
    withSecondLook(BOXES, undefined, objectronLook),
    withSecondLook(3, undefined, both(2, 1)),
    withSecondLook(5, undefined, both(3, 2)),
  ];
  await evaluatePipelines({ benchmark, queries: benchmark.queries, seed: 1, projection: true, variants });
  const results = JSON.parse(
    readFileSync(join(ROOT, '.cache/eval-results/pipeline-seed1-532q-projected.json'), 'utf8'),
  ) as { perQuery: Record<string, { query: number; rank: number | null }[]> };
  const rows = results.perQuery[variants[0]!.name]!;
  const missed = rows.filter(({ rank }) => rank === null || rank >= 10).map(({ query }) => query);
  console.log(`objectron: the ${missed.length} queries the default misses at 10: ${tally(missed)}`);
}

await main();
