import { describe, expect, it } from 'vitest';
import { av1CodedPixels } from '#lib/vision/heif-boxes.ts';

/** An ISO BMFF box. */
function box(type: string, ...payload: Buffer[]): Buffer {
  const body = Buffer.concat(payload);
  const header = Buffer.alloc(8);
  header.writeUInt32BE(8 + body.length, 0);
  header.write(type, 4, 'latin1');
  return Buffer.concat([header, body]);
}

/** A full box: version and flags, then the payload. */
function fullBox(type: string, version: number, ...payload: Buffer[]): Buffer {
  return box(type, Buffer.from([version, 0, 0, 0]), ...payload);
}

const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

/** infe version 2: item id, protection index, item type, an empty name. */
const infe = (id: number, type: string) =>
  fullBox('infe', 2, u16(id), u16(0), Buffer.from(type, 'latin1'), Buffer.from([0]));
const ispe = (width: number, height: number) => fullBox('ispe', 0, u32(width), u32(height));
const auxC = fullBox('auxC', 0, Buffer.from('urn:mpeg:mpegB:cicp:systems:auxiliary:alpha\0', 'latin1'));

/** ipma version 0, 7-bit property indices: [item id, 1-based property indices][]. */
function ipma(entries: [number, number[]][]): Buffer {
  return fullBox(
    'ipma',
    0,
    u32(entries.length),
    ...entries.map(([id, indices]) => Buffer.concat([u16(id), Buffer.from([indices.length, ...indices])])),
  );
}

/** An AVIF-like file: ftyp, then meta with the given items, properties, associations and references. */
function heif(options: {
  items: [number, string][];
  properties: Buffer[];
  associations: Buffer[];
  primary?: number;
  auxiliaryOf?: [number, number][];
  /** A derived item and its inputs (dimg). */
  inputsOf?: [number, number[]];
}): Buffer {
  const meta = fullBox(
    'meta',
    0,
    ...(options.primary !== undefined ? [fullBox('pitm', 0, u16(options.primary))] : []),
    fullBox('iinf', 0, u16(options.items.length), ...options.items.map(([id, type]) => infe(id, type))),
    box('iprp', box('ipco', ...options.properties), ...options.associations),
    ...(options.auxiliaryOf || options.inputsOf
      ? [
          fullBox(
            'iref',
            0,
            ...(options.auxiliaryOf ?? []).map(([from, to]) => box('auxl', u16(from), u16(1), u16(to))),
            ...(options.inputsOf
              ? [
                  box(
                    'dimg',
                    u16(options.inputsOf[0]),
                    u16(options.inputsOf[1].length),
                    ...options.inputsOf[1].map(u16),
                  ),
                ]
              : []),
          ),
        ]
      : []),
  );
  return Buffer.concat([box('ftyp', Buffer.from('avifmif1miafavif', 'latin1')), meta]);
}

describe('av1CodedPixels', () => {
  it('sums the coded size of every AV1 image item', () => {
    // A grid of two 4100×4000 tiles (the grid item itself is no AV1 item)
    const file = heif({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(4100, 4000)],
      associations: [
        ipma([
          [1, [1]],
          [2, [2]],
          [3, [2]],
        ]),
      ],
      primary: 1,
    });
    expect(av1CodedPixels(file)).toBe(8200 * 4000);
  });

  it('leaves out an alpha plane (the source of an auxl reference), not an item that only carries auxC', () => {
    const alpha = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(4096, 4096), auxC],
      associations: [
        ipma([
          [1, [1]],
          [2, [1, 2]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 1]],
    });
    expect(av1CodedPixels(alpha)).toBe(4096 * 4096);
    // auxC on the primary item, and an auxl reference from it: it is decoded all the same
    const disguised = heif({
      items: [[1, 'av01']],
      properties: [ispe(8200, 4000), auxC],
      associations: [ipma([[1, [1, 2]]])],
      primary: 1,
      auxiliaryOf: [[1, 1]],
    });
    expect(av1CodedPixels(disguised)).toBe(8200 * 4000);
    const noReference = heif({
      items: [[1, 'av01']],
      properties: [ispe(8200, 4000), auxC],
      associations: [ipma([[1, [1, 2]]])],
    });
    expect(av1CodedPixels(noReference)).toBe(8200 * 4000);
  });

  it('reads the associations of every ipma box, and refuses an item associated twice', () => {
    const twoBoxes = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(8200, 4000)],
      associations: [ipma([[1, [1]]]), ipma([[2, [2]]])],
      primary: 1,
    });
    expect(av1CodedPixels(twoBoxes)).toBe(64 * 64 + 8200 * 4000);
    // libheif reads an item's first association only: a size given in a second one is none to it
    const twice = heif({
      items: [[1, 'av01']],
      properties: [fullBox('pixi', 0, Buffer.from([3, 8, 8, 8])), ispe(64, 64)],
      associations: [ipma([[1, [1]]]), ipma([[1, [2]]])],
      primary: 1,
    });
    expect(av1CodedPixels(twice)).toBe(Number.POSITIVE_INFINITY);
  });

  it('counts an "alpha plane" larger than its image, or one that is also a grid tile', () => {
    const larger = heif({
      items: [
        [1, 'av01'],
        [2, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(8192, 4096), auxC],
      associations: [
        ipma([
          [1, [1]],
          [2, [2, 3]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 1]],
    });
    expect(av1CodedPixels(larger)).toBe(64 * 64 + 8192 * 4096);
    const tile = heif({
      items: [
        [1, 'grid'],
        [2, 'av01'],
        [3, 'av01'],
      ],
      properties: [ispe(64, 64), ispe(8192, 4096), auxC, ispe(8192, 4096)],
      associations: [
        ipma([
          [1, [1]],
          [2, [2, 3]],
          [3, [4]],
        ]),
      ],
      primary: 1,
      auxiliaryOf: [[2, 3]],
      inputsOf: [1, [2]],
    });
    expect(av1CodedPixels(tile)).toBe(2 * 8192 * 4096);
  });

  it('is Infinity for an AV1 image item with no size, and undefined for no AV1 item or boxes cut short', () => {
    const noSize = heif({
      items: [[1, 'av01']],
      properties: [],
      associations: [ipma([[1, []]])],
      primary: 1,
    });
    expect(av1CodedPixels(noSize)).toBe(Number.POSITIVE_INFINITY);
    const hevc = heif({ items: [[1, 'hvc1']], properties: [ispe(64, 64)], associations: [ipma([[1, [1]]])] });
    expect(av1CodedPixels(hevc)).toBeUndefined();
    const file = heif({ items: [[1, 'av01']], properties: [ispe(64, 64)], associations: [ipma([[1, [1]]])] });
    expect(av1CodedPixels(file)).toBe(64 * 64);
    expect(av1CodedPixels(file.subarray(0, file.length - 3))).toBeUndefined();
  });
});
