/**
 * `npm run bench:vision`: latency of the model layer on this machine, one intra-op thread.
 * Prints median and p90 over repeated runs of: session creation, embedding model alone (batch 1 and 16),
 * decode + preprocess + embed of a 1000-px JPEG, detection model alone, and detection end to end.
 * Targets (../shared/DESIGN.md §6): model ≤ 15 ms/image; decode+preprocess+embed of a 1000-px JPEG ≤ 35 ms.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { buildLayer, DEFAULT_MODEL_DIR } from '#layers/build.ts';
import { loadVision } from '#lib/vision/load-vision.ts';
import { DETECTOR_SPEC, EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { createSession, floatTensor } from '#lib/vision/onnx-session.ts';

const WARMUP = 5;
const RUNS = Number(process.env['BENCH_RUNS'] ?? 40);

interface Figure {
  name: string;
  median: number;
  p90: number;
  perImage?: number;
}

function percentile(sorted: number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]!;
}

async function measure(
  name: string,
  runs: number,
  action: () => Promise<unknown>,
  imagesPerRun = 1,
): Promise<Figure> {
  for (let i = 0; i < Math.min(WARMUP, runs); i += 1) await action();
  const times: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    const started = performance.now();
    await action();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  const median = percentile(times, 0.5);
  return {
    name,
    median,
    p90: percentile(times, 0.9),
    ...(imagesPerRun > 1 ? { perImage: median / imagesPerRun } : {}),
  };
}

async function main(): Promise<void> {
  buildLayer({ ifStale: true });
  const modelDir = DEFAULT_MODEL_DIR;
  const figures: Figure[] = [];

  figures.push(
    await measure('session creation: embedder', 5, () => createSession(join(modelDir, EMBEDDER_SPEC.file))),
  );
  figures.push(
    await measure('session creation: detector', 5, () => createSession(join(modelDir, DETECTOR_SPEC.file))),
  );
  const started = performance.now();
  const vision = await loadVision(modelDir);
  const loadMs = performance.now() - started;

  const embedderSession = await createSession(join(modelDir, EMBEDDER_SPEC.file));
  const size = EMBEDDER_SPEC.inputSize;
  const one = new Float32Array(size * size * 3).map(() => Math.random());
  const sixteen = new Float32Array(16 * size * size * 3).map(() => Math.random());
  figures.push(
    await measure('embedding model only, batch 1', RUNS, () =>
      embedderSession.run({ [EMBEDDER_SPEC.inputName]: floatTensor(one, [1, size, size, 3]) }),
    ),
  );
  figures.push(
    await measure(
      'embedding model only, batch 16',
      Math.ceil(RUNS / 4),
      () => embedderSession.run({ [EMBEDDER_SPEC.inputName]: floatTensor(sixteen, [16, size, size, 3]) }),
      16,
    ),
  );

  // A real photo upscaled to 1000 px wide, as a typical submitted JPEG.
  const photo = readFileSync(join(import.meta.dirname, '../test/fixtures/vision/voc-dinner.jpg'));
  const jpeg1000 = await sharp(photo).resize(1000).jpeg({ quality: 90 }).toBuffer();
  figures.push(
    await measure('decode + preprocess + embed, 1000-px JPEG', RUNS, () => vision.embedder.embed([jpeg1000])),
  );
  const eight = Array.from({ length: 8 }, () => jpeg1000);
  figures.push(
    await measure(
      'decode + preprocess + embed, 8 × 1000-px JPEG',
      Math.ceil(RUNS / 4),
      () => vision.embedder.embed(eight),
      8,
    ),
  );

  const detectorSession = await createSession(join(modelDir, DETECTOR_SPEC.file));
  const detectorInput = new Float32Array(3 * DETECTOR_SPEC.inputSize ** 2).map(() => Math.random());
  const detectorDims = [1, 3, DETECTOR_SPEC.inputSize, DETECTOR_SPEC.inputSize];
  figures.push(
    await measure('detection model only', RUNS, () =>
      detectorSession.run({ [DETECTOR_SPEC.inputName]: floatTensor(detectorInput, detectorDims) }),
    ),
  );
  figures.push(
    await measure('detection end to end, 1000-px JPEG', RUNS, () => vision.detector.detect(jpeg1000)),
  );

  console.log(`vision benchmark (${RUNS} runs after ${WARMUP} warm-up; onnxruntime CPU, 1 intra-op thread)`);
  console.log(`loadVision (both sessions, manifests): ${loadMs.toFixed(0)} ms`);
  console.log('| measurement | median ms | p90 ms | per image ms |');
  console.log('|---|---|---|---|');
  for (const { name, median, p90, perImage } of figures) {
    console.log(
      `| ${name} | ${median.toFixed(1)} | ${p90.toFixed(1)} | ${(perImage ?? median).toFixed(1)} |`,
    );
  }
}

await main();
