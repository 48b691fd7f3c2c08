/**
 * `npx tsx eval/window-crop.ts [--all]`: would re-embedding the query's best window as a crop of its own
 * rank the item better than the window's pooled descriptor? Over the whole benchmark catalogue (projected
 * vectors, brute force), on the 100-query tuning subset (or every query with --all), per kind: the rank of
 * the item by the whole image, by the best window (the regional pass's windows, each item scored by its
 * best window), by the query cropped to its true box (the ceiling), by the crop of the single best window
 * (the window most similar to any item; padded by 0, ¼ or ½ of its side) and by the max of whole image,
 * window and crop. docs/quality.md quotes it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import sharp from 'sharp';
import { loadVision } from '#lib/vision/load-vision.ts';
import { regionalRasterSize, regionWindows } from '#lib/vision/regional.ts';
import { ensureEvalData } from './fetch-data.ts';
import { cropToBox, loadRetrievalBenchmark, stratifiedSubset } from './retrieval-benchmark.ts';

const { values: flags } = parseArgs({ options: { all: { type: 'boolean', default: false } } });
ensureEvalData();
const benchmark = await loadRetrievalBenchmark(1);
const queries = flags.all ? benchmark.queries : stratifiedSubset(benchmark.queries, 100, 1);
const vision = await loadVision(
  join(import.meta.dirname, '../layers/models/build'),
  {},
  { projection: true, regional: true },
);
const regional = vision.regional!;
const read = (file: string) => readFileSync(join(benchmark.directory, file));
const embed = async (bytes: Buffer) => (await vision.embedder.embed([bytes]))[0]!;
const dot = (a: Float32Array, b: Float32Array) => a.reduce((sum, value, i) => sum + value * b[i]!, 0);

const catalogue: Float32Array[] = [];
for (const item of benchmark.items) catalogue.push(await embed(read(item.file)));
const itemIndex = new Map(benchmark.items.map((item, index) => [item.id, index]));
const rankOf = (scores: number[], item: number) => {
  const own = scores[itemIndex.get(item)!]!;
  return 1 + scores.filter((score) => score > own).length;
};

const PADS = [0, 0.25, 0.5];
const rows: { kind: string; ranks: Record<string, number> }[] = [];
for (const query of queries) {
  const bytes = read(query.file);
  const { width = 0, height = 0 } = await sharp(bytes).metadata();
  const raster = regionalRasterSize(width, height);
  const [mapRows, mapCols] = [raster.height / 32, raster.width / 32];
  const regions = await regional.regions(bytes);
  const boxes = regionWindows(mapRows, mapCols);
  if (boxes.length !== regions.length) throw new Error(`${boxes.length} windows, ${regions.length} vectors`);
  const windowScores = catalogue.map((vector) => Math.max(...regions.map((region) => dot(region, vector))));
  let bestWindow = 0;
  let bestScore = -Infinity;
  regions.forEach((region, w) =>
    catalogue.forEach((vector) => {
      const score = dot(region, vector);
      if (score > bestScore) [bestScore, bestWindow] = [score, w];
    }),
  );
  const whole = await embed(bytes);
  const wholeScores = catalogue.map((vector) => dot(whole, vector));
  const trueBox = await embed(await cropToBox(bytes, query.box));
  const ranks: Record<string, number> = {
    'whole image': rankOf(wholeScores, query.item),
    'best window': rankOf(windowScores, query.item),
    'true-box crop (ceiling)': rankOf(
      catalogue.map((vector) => dot(trueBox, vector)),
      query.item,
    ),
  };
  const box = boxes[bestWindow]!;
  const [cellWidth, cellHeight] = [width / mapCols, height / mapRows];
  for (const pad of PADS) {
    const left = Math.max(0, Math.floor((box.left - pad * box.width) * cellWidth));
    const top = Math.max(0, Math.floor((box.top - pad * box.height) * cellHeight));
    const right = Math.min(width, Math.ceil((box.left + (1 + pad) * box.width) * cellWidth));
    const bottom = Math.min(height, Math.ceil((box.top + (1 + pad) * box.height) * cellHeight));
    const crop = await embed(
      await sharp(bytes)
        .extract({ left, top, width: right - left, height: bottom - top })
        .png()
        .toBuffer(),
    );
    const cropScores = catalogue.map((vector) => dot(crop, vector));
    ranks[`best window's crop, pad ${pad}`] = rankOf(cropScores, query.item);
    ranks[`max(whole, window, crop pad ${pad})`] = rankOf(
      cropScores.map((score, i) => Math.max(score, windowScores[i]!, wholeScores[i]!)),
      query.item,
    );
  }
  rows.push({ kind: query.kind, ranks });
}

console.log(`| descriptor | kind | queries | R@1 | R@10 |\n|---|---|---|---|---|`);
for (const name of Object.keys(rows[0]!.ranks))
  for (const kind of ['scene', 'flat']) {
    const ranks = rows.filter((row) => row.kind === kind).map((row) => row.ranks[name]!);
    const recall = (k: number) => (ranks.filter((rank) => rank <= k).length / ranks.length).toFixed(3);
    console.log(`| ${name} | ${kind} | ${ranks.length} | ${recall(1)} | ${recall(10)} |`);
  }
