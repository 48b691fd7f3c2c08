/**
 * The learned projection on the project benchmark: global-embedding Recall@1/5/10 of the whole-image query
 * (and of the query cropped to its true box) for the raw 448-d vector, the PCA-whitening fitted on the
 * projection's training features (the baseline), and the contrastive head (trained here with the recipe
 * plus any flag overrides, and the shipped weights when the model layer has them). Same benchmark, rows and
 * splits as eval/run.ts: tuning = even query ids (choose hyper-parameters there), held-aside = odd ids.
 *
 *   npx tsx eval/projection.ts [--seed 1] [--dim 256] [--tau 0.1] [--epochs 20] [--lr 0.01] [--anchor 1]
 *                              [--eps 0.1] [--batch 64] [--pastes 4] [--models DIR] [--rows all|short]
 *
 * `--pastes` changes the training views (pasted views per object), so its first run extracts them (341 s
 * for the recipe's 6,858 views on 2 cores, ~11 min for 11,430 with --pastes 8); later runs reuse .cache/train-data/.
 *
 * Every query of the benchmark is used (as `eval/run.ts --all`). The raw benchmark features are cached in
 * the benchmark folder (keyed by the embedder's sha256), the training features in .cache/train-data/.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { PROJECTION_RECIPE, recipeFeatures, type ProjectionRecipe } from '#layers/projection/recipe.ts';
import { splitRows, trainProjection, whiteningOf, type TrainedProjection } from '#layers/projection/train.ts';
import { trainingModels } from '#layers/projection/cli.ts';
import {
  applyProjection,
  decodeProjection,
  encodeProjection,
  readProjection,
  type Projection,
} from '#lib/vision/projection.ts';
import { ensureEvalData } from './fetch-data.ts';
import { rankOf, recallAtK } from './metrics.ts';
import { cropToBox, loadRetrievalBenchmark, type Query } from './retrieval-benchmark.ts';

const { values: flags } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    models: { type: 'string', default: join(import.meta.dirname, '../layers/models/build') },
    dim: { type: 'string' },
    tau: { type: 'string' },
    epochs: { type: 'string' },
    lr: { type: 'string' },
    anchor: { type: 'string' },
    eps: { type: 'string' },
    batch: { type: 'string' },
    pastes: { type: 'string' },
    rows: { type: 'string', default: 'all' },
  },
});

const number = (value: string | undefined, fallback: number): number =>
  value === undefined ? fallback : Number(value);
const recipe: ProjectionRecipe = {
  ...PROJECTION_RECIPE,
  pastes: number(flags.pastes, PROJECTION_RECIPE.pastes),
  train: {
    ...PROJECTION_RECIPE.train,
    outDim: number(flags.dim, PROJECTION_RECIPE.train.outDim),
    temperature: number(flags.tau, PROJECTION_RECIPE.train.temperature),
    epochs: number(flags.epochs, PROJECTION_RECIPE.train.epochs),
    learningRate: number(flags.lr, PROJECTION_RECIPE.train.learningRate),
    anchor: number(flags.anchor, PROJECTION_RECIPE.train.anchor),
    whiteningEpsilon: number(flags.eps, PROJECTION_RECIPE.train.whiteningEpsilon),
    batchObjects: number(flags.batch, PROJECTION_RECIPE.train.batchObjects),
  },
};

interface RawFeatures {
  catalogue: Float32Array[];
  queries: Float32Array[];
  crops: Float32Array[];
}

const toProjection = (trained: TrainedProjection): Projection =>
  decodeProjection(encodeProjection(trained.mean, trained.matrix), trained.inDim, trained.outDim);

async function main(): Promise<void> {
  const started = performance.now();
  ensureEvalData();
  const seed = Number(flags.seed);
  const benchmark = await loadRetrievalBenchmark(seed);
  // The training's models, loaded once: their raw embedder (on every core) also embeds the benchmark, whose
  // raw features are then cached per embedder; the regional graph keys the training features.
  const models = await trainingModels(flags.models);
  const embedderSha = models.embedderSha256;
  const queries = benchmark.queries;

  const cacheFile = join(benchmark.directory, `raw-features-${embedderSha.slice(0, 12)}.json`);
  let raw: RawFeatures;
  if (existsSync(cacheFile)) {
    const stored = JSON.parse(readFileSync(cacheFile, 'utf8')) as Record<keyof RawFeatures, number[][]>;
    raw = {
      catalogue: stored.catalogue.map((v) => Float32Array.from(v)),
      queries: stored.queries.map((v) => Float32Array.from(v)),
      crops: stored.crops.map((v) => Float32Array.from(v)),
    };
  } else {
    const embedFiles = async (buffers: () => Promise<Buffer>[]): Promise<Float32Array[]> => {
      const all = buffers();
      const out: Float32Array[] = [];
      for (let i = 0; i < all.length; i += 16)
        out.push(...(await models.embedder.embed(await Promise.all(all.slice(i, i + 16)))));
      return out;
    };
    const read = (file: string): Buffer => readFileSync(join(benchmark.directory, file));
    raw = {
      catalogue: await embedFiles(() => benchmark.items.map(async (item) => read(item.file))),
      queries: await embedFiles(() => queries.map(async (q) => read(q.file))),
      crops: await embedFiles(() => queries.map((q) => cropToBox(read(q.file), q.box))),
    };
    writeFileSync(
      cacheFile,
      JSON.stringify({
        catalogue: raw.catalogue.map((v) => Array.from(v)),
        queries: raw.queries.map((v) => Array.from(v)),
        crops: raw.crops.map((v) => Array.from(v)),
      }),
    );
  }

  const features = await recipeFeatures(recipe, models, {
    reuse: true,
    log: (line) => console.error(line),
  });
  // The view rows: the window rows train the window projection, which this script does not measure.
  const [, set] = splitRows(features.set, 'window');
  console.log(
    `projection eval: seed ${seed}, ${benchmark.items.length} catalogue items, ${queries.length} queries; ` +
      `training features: ${set.kinds.length} views of ${set.objectNames.length} objects${features.reused ? ' (reused)' : ''}`,
  );

  const itemIndex = new Map(benchmark.items.map((item, index) => [item.id, index]));
  /** Ranks of each query's item; also the cosines of matching and of unrelated pairs (tuning queries only). */
  const score = (
    transform: (v: Float32Array) => Float32Array,
    vectors: Float32Array[],
  ): { ranks: number[]; matching: number[]; unrelated: number[] } => {
    const catalogue = raw.catalogue.map(transform);
    const matching: number[] = [];
    const unrelated: number[] = [];
    const ranks = vectors.map(transform).map((vector, q) => {
      const relevant = itemIndex.get(queries[q]!.item)!;
      const scores = catalogue.map((item) => {
        let dot = 0;
        for (let d = 0; d < vector.length; d += 1) dot += vector[d]! * item[d]!;
        return dot;
      });
      if (queries[q]!.id % 2 === 0)
        scores.forEach((value, i) => (i === relevant ? matching : unrelated).push(value));
      return rankOf(scores, relevant);
    });
    return { ranks, matching, unrelated };
  };
  const quantile = (values: number[], p: number): number => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
  };
  const cosineLines: string[] = [];
  const fmt = (value: number): string => value.toFixed(3);
  const report = (method: string, transform: (v: Float32Array) => Float32Array): void => {
    const { ranks, matching, unrelated } = score(transform, raw.queries);
    const cropRanks = flags.rows === 'all' ? score(transform, raw.crops).ranks : [];
    cosineLines.push(
      `cosines ${method}: matching median ${quantile(matching, 0.5).toFixed(2)} p10 ${quantile(matching, 0.1).toFixed(2)}; ` +
        `unrelated median ${quantile(unrelated, 0.5).toFixed(2)} p90 ${quantile(unrelated, 0.9).toFixed(2)} p99 ${quantile(unrelated, 0.99).toFixed(2)} max ${quantile(unrelated, 1).toFixed(2)}`,
    );
    const row = (name: string, keep: (query: Query) => boolean, source = ranks): void => {
      const selected = source.filter((_, i) => keep(queries[i]!));
      if (selected.length === 0) return;
      console.log(
        `| ${method.padEnd(26)} | ${name.padEnd(26)} | ${String(selected.length).padStart(3)} | ${fmt(recallAtK(selected, 1))} | ${fmt(recallAtK(selected, 5))} | ${fmt(recallAtK(selected, 10))} |`,
      );
    };
    if (flags.rows === 'all') {
      row('all', () => true);
      row('scene', (q) => q.kind === 'scene');
      row('flat', (q) => q.kind === 'flat');
    }
    row('tuning (even ids)', (q) => q.id % 2 === 0);
    row('tuning scene', (q) => q.id % 2 === 0 && q.kind === 'scene');
    row('tuning flat', (q) => q.id % 2 === 0 && q.kind === 'flat');
    if (flags.rows === 'all') {
      row('held-aside (odd ids)', (q) => q.id % 2 === 1);
      row('held-aside scene', (q) => q.id % 2 === 1 && q.kind === 'scene');
      row('held-aside flat', (q) => q.id % 2 === 1 && q.kind === 'flat');
      row('true-box crop, all', () => true, cropRanks);
      row('true-box crop, scene', (q) => q.kind === 'scene', cropRanks);
      row('true-box crop, flat', (q) => q.kind === 'flat', cropRanks);
      row('true-box crop, held-aside', (q) => q.id % 2 === 1, cropRanks);
    }
  };

  console.log('| method                     | rows                       |   n | R@1   | R@5   | R@10  |');
  console.log('| -------------------------- | -------------------------- | --- | ----- | ----- | ----- |');
  report('raw 448', (v) => v);
  const { outDim, whiteningEpsilon } = recipe.train;
  const whitening = toProjection(whiteningOf(set, outDim, whiteningEpsilon));
  report(`PCA-whitening ${outDim} (ε ${whiteningEpsilon})`, (v) => applyProjection(whitening, v));
  const t0 = performance.now();
  const trained = trainProjection(set, recipe.train);
  const trainSeconds = (performance.now() - t0) / 1000;
  const contrastive = toProjection(trained);
  report(`contrastive ${outDim}`, (v) => applyProjection(contrastive, v));
  try {
    const { projection, manifest } = readProjection(flags.models, { sha256: embedderSha, dimension: 448 });
    if (projection.version !== contrastive.version)
      report(`shipped ${manifest.outputDimension} (${projection.version})`, (v) =>
        applyProjection(projection, v),
      );
    else console.log(`(the shipped weights ${projection.version} are the contrastive row above)`);
  } catch (error) {
    console.log(`(no shipped projection: ${(error as Error).message})`);
  }
  for (const line of cosineLines) console.log(line);
  console.log(
    `recipe ${JSON.stringify(recipe.train)}; training ${trainSeconds.toFixed(1)} s, final loss ${trained.losses.at(-1)?.toFixed(4)}; total ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
}

await main();
