/**
 * The quantised regional graph's activation ranges and channel means (layers/calibration/regional-ranges.json) are
 * reproducible from the committed script: re-calibrated from the projection's pinned training packages
 * (~25 s once they are unpacked; the fetch is shared with projection-training.test.ts under a lock).
 */
import { describe, expect, it } from 'vitest';
import {
  calibrate,
  calibrationImages,
  committedCalibration,
  calibrationDrift,
} from '#layers/calibration/calibrate.ts';
import { TRAIN_PACKAGES } from '#layers/projection/data.ts';

describe('activation calibration of the quantised regional graph', () => {
  it('re-calibrates from the script to the committed ranges', async () => {
    const committed = committedCalibration();
    const images = calibrationImages();
    const result = await calibrate(images);
    expect(result.images).toEqual(committed.images);
    expect(committed.dataSources).toEqual(TRAIN_PACKAGES);
    expect(Object.keys(result.ranges)).toEqual(Object.keys(committed.ranges));
    expect(Object.keys(result.means).sort()).toEqual(Object.keys(committed.ranges));
    // Stored to 5 significant digits; float sums may differ in the last bits between CPUs.
    const decoders = `committed with sharp ${committed.decoder.sharp} / libvips ${committed.decoder.vips}, now ${result.decoder.sharp} / ${result.decoder.vips}`;
    expect(calibrationDrift(result, committed), decoders).toBeLessThan(1e-3);
  }, 300_000);
});
