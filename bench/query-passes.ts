/**
 * `npx tsx bench/query-passes.ts`: the three passes an image search makes over its query, timed on their
 * own (one process, nothing else): the 224-px embedding, the 448-px regional pass, the query's ORB
 * extraction (its greyscale raster on its own too), then all three started together as a search starts
 * them. Queries: the 29 demo photos upscaled to 1000 × 750 JPEG (q90), as in bench/search.ts. Prints the
 * median wall time per query and, per pass, the process CPU per query (every thread). Useful to tell a
 * code change from this shared machine's drift, which moves bench:search by tens of ms between runs.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import sharp from 'sharp';
import { loadVision } from '#lib/vision/load-vision.ts';
import { extractLocalFeatures } from '#lib/vision/local-features/extract.ts';
import { openImage } from '#lib/vision/image-input.ts';

const demoDir = new URL('../demo/images/', import.meta.url);
const names = (await readdir(demoDir)).filter((name) => name.endsWith('.webp'));
const queries = await Promise.all(
  names.map(async (name) =>
    sharp(await readFile(new URL(name, demoDir)))
      .resize(1000, 750, { fit: 'fill' })
      .jpeg({ quality: 90 })
      .toBuffer(),
  ),
);
const vision = await loadVision(
  join(import.meta.dirname, '../layers/models/build'),
  {},
  { projection: true, regional: true },
);
const regional = vision.regional!;

const passes: [string, (query: Buffer) => Promise<unknown>][] = [
  ['embedding (224 px)', (query) => vision.embedder.embed([query])],
  ['regional pass (448 px)', (query) => regional.regions(query)],
  [
    'ORB raster only (decode, Lanczos, grey)',
    async (query) =>
      (await openImage(query)).pipeline
        .clone()
        .resize(640, 480, { fit: 'fill', kernel: 'lanczos3' })
        .toColourspace('b-w') // as extract.ts makes a query's raster
        .raw()
        .toBuffer(),
  ],
  ['ORB extraction (query)', (query) => extractLocalFeatures(query, { role: 'query' })],
  [
    'all three together',
    (query) =>
      Promise.all([
        extractLocalFeatures(query, { role: 'query' }),
        vision.embedder.embed([query]),
        regional.regions(query),
      ]),
  ],
];

for (const [label, pass] of passes) {
  for (const query of queries.slice(0, 3)) await pass(query);
  const times: number[] = [];
  const cpu = process.cpuUsage();
  for (const query of queries) {
    const start = performance.now();
    await pass(query);
    times.push(performance.now() - start);
  }
  const used = process.cpuUsage(cpu);
  times.sort((a, b) => a - b);
  console.log(
    `${label.padEnd(40)} median ${times[Math.floor(times.length / 2)]!.toFixed(1)} ms, ` +
      `CPU ${((used.user + used.system) / 1000 / queries.length).toFixed(1)} ms per query`,
  );
}
