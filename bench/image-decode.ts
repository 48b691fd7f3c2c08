/**
 * `npm run bench:image-decode -- FILE [PARALLEL]`: what a query image costs before the models
 * see it. Runs, PARALLEL times at once (default 1), what every image search does first: the header
 * inspection, then the one decode that scales a large image down for the search stages (`boundedQuery`).
 * Meanwhile a probe decodes a 1000 × 750 JPEG to the embedder's 224 × 224 every 50 ms, as another
 * search would. Prints the wall time, the outcome, the process's peak RSS
 * (`process.resourceUsage().maxRSS`) and the probe's slowest decode.
 *
 * With `MODELS=1` (PARALLEL 1), it first loads the models as the search function does and then, after the
 * decode, runs them on the scaled-down image (embedder, detector, regional pass) and the detector on the
 * submitted image, as a detection does: the peak RSS of a process that serves both.
 *
 * Run it once per file in a fresh process, so that each peak is that file's own (docs/benchmarks.md
 * "Large AVIFs").
 */
import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { SharpImageInspector } from '#lib/adapters/sharp-image-inspector.ts';
import { DomainError } from '#lib/domain/errors.ts';
import { boundedQuery, MAX_INPUT_PIXELS } from '#lib/vision/image-input.ts';
import { loadVision } from '#lib/vision/load-vision.ts';

const [file, parallel = '1'] = process.argv.slice(2);
if (!file) throw new Error('usage: npm run bench:image-decode -- FILE [PARALLEL]');
const bytes = readFileSync(file);
const inspector = new SharpImageInspector(MAX_INPUT_PIXELS);
const probeImage = await sharp('test/fixtures/vision/voc-dinner.jpg').resize(1000, 750).jpeg().toBuffer();
const probe = () => sharp(probeImage).resize(224, 224, { fit: 'fill' }).raw().toBuffer();
await probe();
const mb = () => Math.round(process.resourceUsage().maxRSS / 1024);
const vision =
  process.env['MODELS'] === '1'
    ? await loadVision('layers/models/build', {}, { projection: true, regional: true })
    : undefined;
/** The models' passes of one search and one detection of `image` (the search's on `bounded`). */
async function models(image: Buffer, bounded: Buffer): Promise<{ searchRssMb: number; detectRssMb: number }> {
  await Promise.all([
    vision!.embedder.embed([bounded]),
    vision!.detector.detect(bounded),
    vision!.regional!.regions(bounded),
  ]);
  const searchRssMb = mb();
  await vision!.detector.detect(image);
  return { searchRssMb, detectRssMb: mb() };
}
if (vision) await models(probeImage, probeImage);
const baseline = process.resourceUsage().maxRSS;
let modelPeaks: { searchRssMb: number; detectRssMb: number } | undefined;

async function once(): Promise<string> {
  try {
    const info = await inspector.inspect(bytes);
    const bounded = await boundedQuery(bytes);
    if (vision) modelPeaks = await models(bytes, bounded.bytes);
    return `decoded ${info.format} ${info.width}x${info.height} → ${bounded.width}x${bounded.height}`;
  } catch (error) {
    if (error instanceof DomainError) return `refused (${error.code}): ${error.message}`;
    throw error;
  }
}

let running = true;
const probeTimes: number[] = [];
const probing = (async () => {
  while (running) {
    const started = performance.now();
    await probe();
    probeTimes.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
})();
const started = performance.now();
const outcomes = await Promise.all(Array.from({ length: Number(parallel) }, once));
const ms = performance.now() - started;
running = false;
await probing;
console.log(
  JSON.stringify({
    file,
    parallel: Number(parallel),
    ms: Math.round(ms),
    peakRssMb: mb(),
    ...modelPeaks,
    baselineRssMb: Math.round(baseline / 1024),
    probeMaxMs: Math.round(Math.max(...probeTimes)),
    outcome: [...new Set(outcomes)].join(' | '),
  }),
);
