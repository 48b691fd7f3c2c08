/**
 * Project benchmark (`npm run eval`): detector mAP@0.5 on real ground-truth photos and on the COCO-labelled
 * composite queries, and whole-image global-embedding Recall@1/5/10 of the seeded retrieval benchmark
 * (query vs the full catalogue, cosine), overall, per kind (scene/flat) and per split: "tuning" (even query
 * ids) vs "held-aside" (odd ids; never to be used for tuning), plus ms per query. "true-box crop" embeds the
 * query cropped to its exact box: the ceiling of global features with a perfect detector.
 *
 * Flags: --seed N (default 1) · --queries N (stratified subset by kind, default 300) · --all (every query)
 *        · --models DIR (default layers/models/build) · --no-detector (skip the detector scores)
 *        · --fashion (also Fashion-MNIST precision@10, 2,000 gallery / 500 queries, about a minute)
 *        · --no-pipeline (skip the full search pipeline) · --pipeline-only (only the full search pipeline)
 *        · --projection off|on|both (default both): the pipeline with the raw and/or projected embedding
 *        · --only TEXT: only the pipeline rows whose name contains TEXT (repeatable)
 *
 * Then the full search pipeline (eval/pipeline.ts): the catalogue imported through the real import into a
 * temporary local stack, every query searched through the use case once per stage (the ablation table).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadVision } from '#lib/vision/load-vision.ts';
import { ensureEvalData } from './fetch-data.ts';
import { loadDetectionPhotos } from './detection-photos.ts';
import { loadFashionMnist, precisionAtK } from './fashion-mnist.ts';
import { meanAveragePrecision, rankOf, recallAtK, type DetectionSample } from './metrics.ts';
import { defaultVariants, evaluatePipelines } from './pipeline.ts';
import {
  cropToBox,
  loadRetrievalBenchmark,
  stratifiedSubset,
  type Query,
  type RetrievalBenchmark,
} from './retrieval-benchmark.ts';

const { values: flags } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    queries: { type: 'string', default: '300' },
    all: { type: 'boolean', default: false },
    models: { type: 'string', default: join(import.meta.dirname, '../layers/models/build') },
    'no-detector': { type: 'boolean', default: false },
    fashion: { type: 'boolean', default: false },
    'no-pipeline': { type: 'boolean', default: false },
    'pipeline-only': { type: 'boolean', default: false },
    projection: { type: 'string', default: 'both' },
    only: { type: 'string', multiple: true },
  },
});
const seed = Number(flags.seed);
const subsetSize = Number(flags.queries);
if (!Number.isInteger(seed) || !Number.isInteger(subsetSize) || subsetSize <= 0)
  throw new Error('--seed and --queries take positive integers');

const fmt = (value: number): string => value.toFixed(3);

/** The full pipeline without and/or with the learned projection (`--projection off|on|both`). */
async function pipelines(): Promise<void> {
  const benchmark = await loadRetrievalBenchmark(seed);
  const queries = flags.all ? benchmark.queries : stratifiedSubset(benchmark.queries, subsetSize, seed);
  const which = flags.projection === 'on' ? [true] : flags.projection === 'off' ? [false] : [false, true];
  const only = flags.only;
  for (const projection of which) {
    const variants = defaultVariants(projection).filter(
      ({ name }) => !only || only.some((text) => name.includes(text)),
    );
    // Before the catalogue import, which takes minutes.
    if (variants.length === 0) throw new Error(`--only ${only!.join(', ')} matched no pipeline row`);
    await evaluatePipelines({ benchmark, queries, seed, projection, variants });
  }
}

/**
 * Rank of `target` in the catalogue when each item scores its best dot product with any of `vectors`
 * (one vector: plain cosine retrieval; a query's windows: the best window), brute force.
 */
function bestRank(
  catalogue: readonly Float32Array[],
  vectors: readonly Float32Array[],
  target: number,
): number {
  const scores = catalogue.map((item) => {
    let top = Number.NEGATIVE_INFINITY;
    for (const vector of vectors) {
      let dot = 0;
      for (let d = 0; d < vector.length; d += 1) dot += vector[d]! * item[d]!;
      top = Math.max(top, dot);
    }
    return top;
  });
  return rankOf(scores, target);
}

/**
 * Regional descriptors on their own (lib/vision/regional.ts): each catalogue item scored by the best of
 * the query's ~75 windows, brute force over the catalogue, next to the whole image, both in the projected
 * space (the regional windows only exist there).
 */
async function regionalRows(
  benchmark: RetrievalBenchmark,
  itemIndex: Map<number, number>,
  queries: readonly Query[],
): Promise<void> {
  const projected = await loadVision(flags.models, {}, { projection: true, regional: true });
  const read = (file: string) => readFileSync(join(benchmark.directory, file));
  const catalogue: Float32Array[] = [];
  for (let i = 0; i < benchmark.items.length; i += 16)
    catalogue.push(
      ...(await projected.embedder.embed(benchmark.items.slice(i, i + 16).map((item) => read(item.file)))),
    );
  const wholeRanks: number[] = [];
  const regionRanks: number[] = [];
  let regionMs = 0;
  for (const query of queries) {
    const image = read(query.file);
    const target = itemIndex.get(query.item)!;
    wholeRanks.push(bestRank(catalogue, await projected.embedder.embed([image]), target));
    const started = performance.now();
    const windows = await projected.regional!.regions(image);
    regionMs += performance.now() - started;
    regionRanks.push(bestRank(catalogue, windows, target));
  }
  const row = (name: string, ranks: number[], keep: (query: Query) => boolean): void => {
    const selected = ranks.filter((_, i) => keep(queries[i]!));
    if (selected.length === 0) return;
    console.log(
      `projected ${name.padEnd(30)} n=${String(selected.length).padStart(4)}  R@1 ${fmt(recallAtK(selected, 1))}  R@5 ${fmt(recallAtK(selected, 5))}  R@10 ${fmt(recallAtK(selected, 10))}`,
    );
  };
  for (const [name, ranks] of [
    ['whole image', wholeRanks],
    ['best region', regionRanks],
  ] as const) {
    row(`${name}, all`, ranks, () => true);
    row(`${name}, scene`, ranks, (q) => q.kind === 'scene');
    row(`${name}, flat`, ranks, (q) => q.kind === 'flat');
    row(`${name}, held-aside scene`, ranks, (q) => q.id % 2 === 1 && q.kind === 'scene');
  }
  console.log(
    `regional descriptors: ${(regionMs / queries.length).toFixed(1)} ms/query (decode, 448-px pass, windows)`,
  );
}

async function main(): Promise<void> {
  const started = performance.now();
  ensureEvalData();
  const benchmark = await loadRetrievalBenchmark(seed);
  const vision = await loadVision(flags.models, { scoreThreshold: 0.05 });
  const queries = flags.all ? benchmark.queries : stratifiedSubset(benchmark.queries, subsetSize, seed);
  console.log(
    `eval: seed ${seed}, ${benchmark.items.length} catalogue items, ${queries.length}/${benchmark.queries.length} queries` +
      ` (${queries.filter((q) => q.kind === 'scene').length} scene, ${queries.filter((q) => q.kind === 'flat').length} flat)`,
  );

  if (flags['pipeline-only']) {
    await pipelines();
    return;
  }

  // (a) Detector mAP@0.5.
  if (!flags['no-detector']) {
    const photos = loadDetectionPhotos();
    const photoSamples: DetectionSample[] = [];
    let detectMs = 0;
    for (const photo of photos) {
      const t0 = performance.now();
      const detections = await vision.detector.detect(photo.bytes);
      detectMs += performance.now() - t0;
      photoSamples.push({ truth: photo.truth, detections });
    }
    const photoMap = meanAveragePrecision(photoSamples);
    console.log(
      `detector mAP@0.5, real photos (${photos.length} photos, ${photoSamples.reduce((n, s) => n + s.truth.length, 0)} boxes, ${photoMap.perClass.size} classes): ${fmt(photoMap.mAP)}` +
        `  [${[...photoMap.perClass].map(([label, ap]) => `${label} ${ap.toFixed(2)}`).join(', ')}]` +
        `  ${(detectMs / Math.max(photos.length, 1)).toFixed(1)} ms/photo`,
    );
    const cocoOf = new Map(benchmark.items.map((item) => [item.id, item.coco]));
    const labelled = queries.filter((q) => cocoOf.get(q.item) !== undefined);
    const compositeSamples: DetectionSample[] = [];
    for (const query of labelled) {
      const detections = await vision.detector.detect(readFileSync(join(benchmark.directory, query.file)));
      compositeSamples.push({ truth: [{ label: cocoOf.get(query.item)!, box: query.box }], detections });
    }
    if (compositeSamples.length > 0) {
      const compositeMap = meanAveragePrecision(compositeSamples);
      console.log(
        `detector mAP@0.5, COCO-labelled composite queries (${compositeSamples.length} queries, ${compositeMap.perClass.size} classes): ${fmt(compositeMap.mAP)}`,
      );
    }
  }

  // (b) Global embedding retrieval.
  const embedAll = async (files: readonly string[]): Promise<Float32Array[]> => {
    const out: Float32Array[] = [];
    for (let i = 0; i < files.length; i += 16) {
      const batch = files.slice(i, i + 16).map((file) => readFileSync(join(benchmark.directory, file)));
      out.push(...(await vision.embedder.embed(batch)));
    }
    return out;
  };
  const catalogue = await embedAll(benchmark.items.map((item) => item.file));
  const itemIndex = new Map(benchmark.items.map((item, index) => [item.id, index]));
  const t0 = performance.now();
  const queryVectors = await embedAll(queries.map((q) => q.file));
  const ranks = queryVectors.map((vector, q) =>
    bestRank(catalogue, [vector], itemIndex.get(queries[q]!.item)!),
  );
  const msPerQuery = (performance.now() - t0) / queries.length;
  // Upper bound of global features with a perfect detector: the query cropped to its true box.
  const cropVectors: Float32Array[] = [];
  for (let i = 0; i < queries.length; i += 16) {
    const crops = await Promise.all(
      queries
        .slice(i, i + 16)
        .map((query) => cropToBox(readFileSync(join(benchmark.directory, query.file)), query.box)),
    );
    cropVectors.push(...(await vision.embedder.embed(crops)));
  }
  const cropRanks = cropVectors.map((vector, q) =>
    bestRank(catalogue, [vector], itemIndex.get(queries[q]!.item)!),
  );
  const report = (name: string, keep: (query: Query) => boolean, source = ranks): void => {
    const selected = source.filter((_, i) => keep(queries[i]!));
    if (selected.length === 0) return;
    console.log(
      `embedding ${name.padEnd(24)} n=${String(selected.length).padStart(4)}  R@1 ${fmt(recallAtK(selected, 1))}  R@5 ${fmt(recallAtK(selected, 5))}  R@10 ${fmt(recallAtK(selected, 10))}`,
    );
  };
  report('all', () => true);
  report('scene', (q) => q.kind === 'scene');
  report('flat', (q) => q.kind === 'flat');
  report('tuning (even ids)', (q) => q.id % 2 === 0);
  report('held-aside (odd ids)', (q) => q.id % 2 === 1);
  report('held-aside scene', (q) => q.id % 2 === 1 && q.kind === 'scene');
  report('held-aside flat', (q) => q.id % 2 === 1 && q.kind === 'flat');
  report('true-box crop, all', () => true, cropRanks);
  report('true-box crop, scene', (q) => q.kind === 'scene', cropRanks);
  report('true-box crop, flat', (q) => q.kind === 'flat', cropRanks);
  console.log(
    `embedding: ${msPerQuery.toFixed(1)} ms/query (embed + brute-force cosine over ${catalogue.length}); total ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  await regionalRows(benchmark, itemIndex, queries);

  // (c) The full search pipeline, stage by stage.
  if (!flags['no-pipeline']) await pipelines();

  // (d) Fashion-MNIST category precision@10.
  if (flags.fashion) {
    const t1 = performance.now();
    const gallery = await loadFashionMnist(0, 2000);
    const probes = await loadFashionMnist(2000, 500);
    const embedBuffers = async (images: readonly Buffer[]): Promise<Float32Array[]> => {
      const out: Float32Array[] = [];
      for (let i = 0; i < images.length; i += 32)
        out.push(...(await vision.embedder.embed(images.slice(i, i + 32))));
      return out;
    };
    const galleryVectors = await embedBuffers(gallery.images);
    const probeVectors = await embedBuffers(probes.images);
    const p10 = precisionAtK(probeVectors, probes.labels, galleryVectors, gallery.labels, 10);
    console.log(
      `fashion-mnist P@10 (2,000 gallery / 500 queries, t10k 0–1999 / 2000–2499): ${fmt(p10)}  ${((performance.now() - t1) / 1000).toFixed(1)} s`,
    );
  }
}

await main();
