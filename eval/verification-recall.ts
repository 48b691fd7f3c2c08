/**
 * `npx tsx eval/verification-recall.ts [--queries N] [--seed N]`: how often geometric verification can
 * confirm the right item at all, independent of any shortlist. Each query of the stratified subset (the
 * 100-query tuning subset by default) is verified against its own item's catalogue features and against
 * the 41 fixed other items (every 13th); prints the share of queries whose item reaches 6–12 inliers and how
 * many queries have a stranger at that level, per matcher setting (the default, exhaustive matching, no
 * cross-check, a 8-px RANSAC threshold, 1000 catalogue keypoints). docs/quality.md quotes it.
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
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import { ensureEvalData } from './fetch-data.ts';
import { loadRetrievalBenchmark, stratifiedSubset } from './retrieval-benchmark.ts';

const { values: flags } = parseArgs({
  options: { seed: { type: 'string', default: '1' }, queries: { type: 'string', default: '100' } },
});
const seed = Number(flags.seed);
ensureEvalData();
const benchmark = await loadRetrievalBenchmark(seed);
const queries = stratifiedSubset(benchmark.queries, Number(flags.queries), seed);
const strangers = benchmark.items.filter((_, i) => i % 13 === 0).map((item) => item.id);
const read = (file: string) => readFileSync(join(benchmark.directory, file));

const settings: { name: string; catalogue?: Partial<ExtractOptions>; verify?: VerifyOptions }[] = [
  { name: 'default (hashed, cross-check, 5 px, 500 catalogue keypoints)' },
  { name: 'exhaustive matching', verify: { strategy: 'exhaustive' } },
  { name: 'no cross-check', verify: { crossCheck: false } },
  { name: 'RANSAC threshold 8 px', verify: { threshold: 8 } },
  { name: '1000 catalogue keypoints', catalogue: { maxFeatures: 1000 } },
];
const queryFeatures = new Map<number, LocalFeatures>();
for (const query of queries)
  queryFeatures.set(query.id, await extractLocalFeatures(read(query.file), { role: 'query' }));

for (const setting of settings) {
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
  for (const t of [6, 8, 10, 12])
    console.log(
      `  item ≥ ${t} inliers: all ${share(rows, t)}, scene ${share(scene, t)}; queries with a stranger ≥ ${t}: ${rows.filter((row) => row.stranger >= t).length}/${rows.length}`,
    );
}
