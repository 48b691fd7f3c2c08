/**
 * `npx tsx eval/window-projection.ts`: what the window projection buys the regional windows on their own.
 * Over the whole benchmark catalogue (projected packshot vectors, brute force), every query's regional
 * windows (lib/vision/regional.ts) are projected once with the catalogue's projection and once with the
 * window projection (both as shipped in the model layer); each item is scored by its best window, and
 * by the better of the whole image and the best window on their calibrated scales (as search fuses
 * them). Recall per kind, on the tuning (even ids) and held-aside (odd ids) halves; and, for the score's
 * calibration (REGIONAL_COSINE_SCALE), the best window cosine of the true item and of the 30 unrelated
 * photos of eval/pipeline.ts over the catalogue. docs/vision.md quotes it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadVision } from '#lib/vision/load-vision.ts';
import {
  applyProjection,
  PROJECTED_COSINE_SCALE,
  readProjection,
  readWindowProjection,
  type Projection,
} from '#lib/vision/projection.ts';
import { REGIONAL_COSINE_SCALE, regionWindows } from '#lib/vision/regional.ts';
import { EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { pooledWindow } from '#layers/projection/windows.ts';
import { ensureEvalData } from './fetch-data.ts';
import { unrelatedQueriesFor } from './pipeline.ts';
import { loadRetrievalBenchmark } from './retrieval-benchmark.ts';

const modelDir = join(import.meta.dirname, '../layers/models/build');
ensureEvalData();
const benchmark = await loadRetrievalBenchmark(1);
// The raw embedder (vectors projected here) and the regional graph as the service loads it.
const raw = await loadVision(modelDir);
const service = await loadVision(modelDir, {}, { projection: true, regional: true });
const projection = readProjection(modelDir, {
  sha256: raw.manifests.embedder.sha256,
  dimension: EMBEDDER_SPEC.dimension,
}).projection;
const windowProjection = readWindowProjection(modelDir, {
  projectionSha256: service.manifests.projection!.sha256,
  regionalSha256: service.manifests.regional!.sha256,
  projection,
}).projection;
const read = (file: string) => readFileSync(join(benchmark.directory, file));
const dot = (a: Float32Array, b: Float32Array) => {
  let sum = 0;
  for (let i = 0; i < a.length; i += 1) sum += a[i]! * b[i]!;
  return sum;
};
const scaled = (
  cosine: number,
  { cosineFloor, cosineCeiling }: { cosineFloor: number; cosineCeiling: number },
) => (cosine - cosineFloor) / (cosineCeiling - cosineFloor);

const catalogue: Float32Array[] = [];
for (const item of benchmark.items)
  catalogue.push(applyProjection(projection, (await raw.embedder.embed([read(item.file)]))[0]!));
const itemIndex = new Map(benchmark.items.map((item, index) => [item.id, index]));

const heads: Record<string, Projection> = {
  'catalogue projection': projection,
  'window projection': windowProjection,
};
/** The query's windows, pooled but not projected. */
async function pooledWindows(bytes: Buffer): Promise<Float32Array[]> {
  const { map } = await service.regional!.featureMap(bytes);
  return regionWindows(map.rows, map.cols).map((window) => pooledWindow(map, window));
}
const ownCosines: Record<string, number[]> = {};
const rows: { id: number; kind: string; ranks: Record<string, number> }[] = [];
for (const query of benchmark.queries) {
  const bytes = read(query.file);
  const whole = applyProjection(projection, (await raw.embedder.embed([bytes]))[0]!);
  const pooled = await pooledWindows(bytes);
  const wholeScores = catalogue.map((vector) => dot(whole, vector));
  const target = itemIndex.get(query.item)!;
  const rankOf = (scores: number[]) => 1 + scores.filter((score) => score > scores[target]!).length;
  const ranks: Record<string, number> = {};
  for (const [name, head] of Object.entries(heads)) {
    const windows = pooled.map((vector) => applyProjection(head, vector));
    const windowScores = catalogue.map((vector) => Math.max(...windows.map((window) => dot(window, vector))));
    ranks[`best window, ${name}`] = rankOf(windowScores);
    (ownCosines[name] ??= []).push(windowScores[target]!);
    ranks[`max(whole, window), ${name}`] = rankOf(
      windowScores.map((score, i) =>
        Math.max(scaled(wholeScores[i]!, PROJECTED_COSINE_SCALE), scaled(score, REGIONAL_COSINE_SCALE)),
      ),
    );
  }
  rows.push({ id: query.id, kind: query.kind, ranks });
}

console.log('| windows scored by | split | kind | queries | R@1 | R@10 |\n|---|---|---|---|---|---|');
for (const name of Object.keys(rows[0]!.ranks))
  for (const split of ['tuning', 'held-aside'])
    for (const kind of ['scene', 'flat']) {
      const ranks = rows
        .filter((row) => row.kind === kind && (row.id % 2 === 0) === (split === 'tuning'))
        .map((row) => row.ranks[name]!);
      const recall = (k: number) => (ranks.filter((rank) => rank <= k).length / ranks.length).toFixed(3);
      console.log(`| ${name} | ${split} | ${kind} | ${ranks.length} | ${recall(1)} | ${recall(10)} |`);
    }

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))]!;
const unrelated = await unrelatedQueriesFor(benchmark, 1);
for (const [name, head] of Object.entries(heads)) {
  const best: number[] = [];
  for (const bytes of unrelated) {
    const windows = (await pooledWindows(bytes)).map((vector) => applyProjection(head, vector));
    best.push(Math.max(...catalogue.flatMap((vector) => windows.map((window) => dot(window, vector)))));
  }
  const own = ownCosines[name]!;
  console.log(
    `${name}: the item's best window cosine median ${percentile(own, 0.5).toFixed(3)}, p90 ${percentile(own, 0.9).toFixed(3)}; ` +
      `the ${unrelated.length} unrelated photos' best window over the catalogue median ${percentile(best, 0.5).toFixed(3)}, max ${Math.max(...best).toFixed(3)}`,
  );
}
