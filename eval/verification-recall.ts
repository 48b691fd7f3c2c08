/**
 * `npx tsx eval/verification-recall.ts [--queries N | --half tuning|held-aside] [--seed N] [--only TEXT]`:
 * how often geometric verification can confirm the right item at all, independent of any shortlist. Each
 * query of the stratified subset (the 100-query tuning subset by default; `--half` takes every even-id
 * or every odd-id query instead) is verified against its own item's catalogue features and against the 41
 * fixed other items (every 13th); prints the share of queries whose item reaches 5–12 inliers and how many
 * queries have a stranger at that level, per setting: the default, the previous keypoint recipe (FAST
 * threshold 20, 500 catalogue keypoints) and its parts, exhaustive matching, no cross-check, a 8-px RANSAC
 * threshold, 1000 catalogue keypoints, and a stricter geometric model: a similarity (rotation, scale,
 * shift: 2-point hypotheses, every pair tried), which is how the benchmark's objects were pasted and gives
 * chance matches fewer ways to line up. `--only` runs the settings whose name contains TEXT.
 * docs/quality.md quotes it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  extractLocalFeatures,
  verifyCandidates,
  type ExtractOptions,
  type VerifyOptions,
} from '#lib/vision/local-features/index.ts';
import { matchDescriptorSets } from '#lib/vision/local-features/matcher.ts';
import type { FeatureSet, LocalFeatures } from '#lib/vision/local-features/types.ts';
import { ensureEvalData } from './fetch-data.ts';
import { loadRetrievalBenchmark, stratifiedSubset } from './retrieval-benchmark.ts';

const { values: flags } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    queries: { type: 'string' },
    half: { type: 'string' },
    only: { type: 'string' },
  },
});
const seed = Number(flags.seed);
if (flags.half !== undefined && flags.half !== 'tuning' && flags.half !== 'held-aside')
  throw new Error(`--half takes tuning or held-aside, not ${flags.half}`);
if (flags.half !== undefined && flags.queries !== undefined)
  throw new Error('--half takes a fixed half of the queries: it does not go with --queries');
ensureEvalData();
const benchmark = await loadRetrievalBenchmark(seed);
const queries = flags.half
  ? benchmark.queries.filter((query) => query.id % 2 === (flags.half === 'tuning' ? 0 : 1))
  : stratifiedSubset(benchmark.queries, Number(flags.queries ?? '100'), seed);
const strangers = benchmark.items.filter((_, i) => i % 13 === 0).map((item) => item.id);
const read = (file: string) => readFileSync(join(benchmark.directory, file));

const allSettings: {
  name: string;
  catalogue?: Partial<ExtractOptions>;
  query?: Partial<ExtractOptions>;
  verify?: VerifyOptions;
  /** Count inliers of the best similarity within this many px instead of the homography's. */
  similarity?: number;
}[] = [
  { name: 'default (hashed, cross-check, 5 px; FAST 7, 800 catalogue keypoints)' },
  {
    name: 'recipe 1 (FAST 20, 500 catalogue keypoints)',
    catalogue: { fastThreshold: 20, maxFeatures: 500 },
    query: { fastThreshold: 20 },
  },
  { name: 'recipe 1, query at FAST 7', catalogue: { fastThreshold: 20, maxFeatures: 500 } },
  { name: 'FAST 7, 500 catalogue keypoints', catalogue: { maxFeatures: 500 } },
  { name: 'exhaustive matching', verify: { strategy: 'exhaustive' } },
  { name: 'no cross-check', verify: { crossCheck: false } },
  { name: 'RANSAC threshold 8 px', verify: { threshold: 8 } },
  { name: '1000 catalogue keypoints', catalogue: { maxFeatures: 1000 } },
  { name: 'similarity model, 3 px (same matches)', similarity: 3 },
  { name: 'similarity model, 5 px (same matches)', similarity: 5 },
  { name: 'similarity model, 3 px, no cross-check', similarity: 3, verify: { crossCheck: false } },
];
const settings = allSettings.filter((setting) => !flags.only || setting.name.includes(flags.only));
if (settings.length === 0) throw new Error(`--only ${flags.only} matches no setting`);

/**
 * Inliers of the best similarity transform (q = z·p + t, z complex: rotation and scale, no reflection)
 * through any two matches at least 10 px apart with a scale within 1/8–8, as the homography's area bound.
 */
function similarityInliers(
  query: FeatureSet,
  target: FeatureSet,
  pairs: Int32Array,
  threshold: number,
): number {
  const n = pairs.length / 2;
  const at = (points: Float32Array, index: number) => [points[2 * index]!, points[2 * index + 1]!] as const;
  const source = Array.from({ length: n }, (_, k) => at(query.points, pairs[2 * k]!));
  const dest = Array.from({ length: n }, (_, k) => at(target.points, pairs[2 * k + 1]!));
  let best = 0;
  for (let i = 0; i < n; i += 1)
    for (let j = i + 1; j < n; j += 1) {
      const [px, py] = [source[j]![0] - source[i]![0], source[j]![1] - source[i]![1]];
      const [qx, qy] = [dest[j]![0] - dest[i]![0], dest[j]![1] - dest[i]![1]];
      const d = px * px + py * py;
      if (d < 100) continue;
      const [a, b] = [(qx * px + qy * py) / d, (qy * px - qx * py) / d];
      if (a * a + b * b < 1 / 64 || a * a + b * b > 64) continue;
      const ox = dest[i]![0] - (a * source[i]![0] - b * source[i]![1]);
      const oy = dest[i]![1] - (b * source[i]![0] + a * source[i]![1]);
      let count = 0;
      for (let k = 0; k < n; k += 1) {
        const ex = a * source[k]![0] - b * source[k]![1] + ox - dest[k]![0];
        const ey = b * source[k]![0] + a * source[k]![1] + oy - dest[k]![1];
        if (ex * ex + ey * ey < threshold * threshold) count += 1;
      }
      best = Math.max(best, count);
    }
  return best;
}

/** The better orientation, as verifyCandidates pairs them (the candidate as stored and mirrored). */
function similarityVerify(
  query: LocalFeatures,
  candidate: LocalFeatures,
  threshold: number,
  crossCheck = true,
): number {
  const targets = candidate.mirrored ? [candidate.original, candidate.mirrored] : [candidate.original];
  const matches = matchDescriptorSets(
    query.original.descriptors,
    targets.map((target) => target.descriptors),
    { crossCheck },
  );
  return Math.max(
    ...targets.map((target, k) => similarityInliers(query.original, target, matches[k]!, threshold)),
  );
}
/** Query features per query-side option set, extracted once each. */
const queryFeaturesBy = new Map<string, Map<number, LocalFeatures>>();
async function queryFeaturesOf(options: Partial<ExtractOptions> = {}): Promise<Map<number, LocalFeatures>> {
  const key = JSON.stringify(options);
  let features = queryFeaturesBy.get(key);
  if (!features) {
    features = new Map();
    for (const query of queries)
      features.set(query.id, await extractLocalFeatures(read(query.file), { ...options, role: 'query' }));
    queryFeaturesBy.set(key, features);
  }
  return features;
}

for (const setting of settings) {
  const queryFeatures = await queryFeaturesOf(setting.query);
  const catalogue = new Map<number, LocalFeatures>();
  for (const id of new Set([...queries.map((q) => q.item), ...strangers])) {
    const item = benchmark.items.find((candidate) => candidate.id === id)!;
    catalogue.set(
      id,
      await extractLocalFeatures(read(item.file), { role: 'catalogue', ...setting.catalogue }),
    );
  }
  const rows = queries.map((query) => {
    const others = strangers.filter((id) => id !== query.item);
    const threshold = setting.similarity;
    if (threshold !== undefined) {
      const inliers = (id: number) =>
        similarityVerify(
          queryFeatures.get(query.id)!,
          catalogue.get(id)!,
          threshold,
          setting.verify?.crossCheck ?? true,
        );
      return { kind: query.kind, own: inliers(query.item), stranger: Math.max(0, ...others.map(inliers)) };
    }
    const [own, ...rest] = verifyCandidates(
      queryFeatures.get(query.id)!,
      [catalogue.get(query.item), ...others.map((id) => catalogue.get(id))],
      setting.verify,
    );
    return { kind: query.kind, own: own!.inliers, stranger: Math.max(0, ...rest.map((r) => r.inliers)) };
  });
  const scene = rows.filter((row) => row.kind === 'scene');
  const share = (set: typeof rows, t: number) =>
    (set.filter((row) => row.own >= t).length / set.length).toFixed(3);
  console.log(`${setting.name} (${queries.length} queries, ${strangers.length} strangers each):`);
  for (const t of [5, 6, 7, 8, 10, 12])
    console.log(
      `  item ≥ ${t} inliers: all ${share(rows, t)}, scene ${share(scene, t)}; queries with a stranger ≥ ${t}: ${rows.filter((row) => row.stranger >= t).length}/${rows.length}`,
    );
}
