import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { expectError } from '#test/support/error-shape.ts';
import { withScans } from '#test/support/jpeg-scans.ts';
import { pngBase64, startTestStack, type TestStack } from '#test/support/local-stack.ts';

/** Faults injected into the real stack's adapters: what a client sees when a dependency fails. */
let stack: TestStack;
let image: string;
const auth = () => ({ authorization: `Bearer ${stack.demo.searchId}` });

beforeAll(async () => {
  stack = await startTestStack();
  image = await pngBase64();
});

afterAll(async () => {
  vi.restoreAllMocks();
  await stack?.stop();
});

describe('dependency faults', () => {
  it('returns 500 internal without leaking the cause when a store fails unexpectedly', async () => {
    const spy = vi
      .spyOn(stack.container.keys, 'get')
      .mockRejectedValueOnce(new Error('secret table arn:aws:dynamodb:eu-west-1:123:table/x is broken'));

    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: auth(),
    });

    expectError(response, 500, 'internal');
    expect(JSON.stringify(response.body)).not.toMatch(/secret|arn:|table/);
    spy.mockRestore();
  });

  it('returns 503 unavailable when the database throttles', async () => {
    const throttled = Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' });
    const spy = vi.spyOn(stack.container.usage, 'consume').mockRejectedValueOnce(throttled);

    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: auth(),
    });

    expectError(response, 503, 'unavailable');
    spy.mockRestore();
  });

  it('still answers when usage metering fails', async () => {
    const spy = vi.spyOn(stack.container.usage, 'record').mockRejectedValueOnce(new Error('metering down'));

    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: image },
      headers: auth(),
    });

    expect(response.status).toBe(200);
    expect(spy).toHaveBeenCalledTimes(1);
    spy.mockRestore();
  });

  it('returns 413 payload_too_large for a body over the limit, before parsing it', async () => {
    const response = await stack.call('POST', '/api/v1/search/image', {
      raw: JSON.stringify({ imageData: 'A'.repeat(7 * 1024 * 1024) }),
      headers: { ...auth(), 'content-type': 'application/json' },
    });
    expectError(response, 413, 'payload_too_large');
  });

  it('returns 422 invalid_image for an image over the pixel limit, before decoding it', async () => {
    const { default: sharp } = await import('sharp');
    // 9000 x 5000 = 45 megapixels of one colour compresses to a few kilobytes: a decompression bomb.
    const bomb = await sharp({ create: { width: 9000, height: 5000, channels: 3, background: '#fff' } })
      .png({ compressionLevel: 9 })
      .toBuffer();
    const response = await stack.call('POST', '/api/v1/search/image', {
      body: { imageData: bomb.toString('base64') },
      headers: auth(),
    });
    expectError(response, 422, 'invalid_image');
    expect(response.body.error.message).toMatch(/megapixels/);
  });

  it('returns 422 invalid_image for a side over 16,384 pixels or a JPEG of hundreds of scans, before decoding', async () => {
    const { default: sharp } = await import('sharp');
    // 40,000 × 1 (0.04 megapixels): libvips' resizes of such a strip took gigabytes at 39,000,000 × 1
    const strip = await sharp({ create: { width: 40_000, height: 1, channels: 3, background: '#fff' } })
      .png()
      .toBuffer();
    // A JPEG whose one scan is repeated: decode time grows with the scans
    const jpeg = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#c33' } })
      .jpeg()
      .toBuffer();
    const scans = withScans(jpeg, 501);
    for (const [image, message] of [
      [strip, /exceeds the limit of 16384 pixels per side/],
      [scans, /more than 100 scans/],
    ] as const) {
      for (const path of ['/api/v1/search/image', '/api/v1/detect', '/api/v1/related']) {
        const response = await stack.call('POST', path, {
          body: { imageData: image.toString('base64') },
          headers: auth(),
        });
        expectError(response, 422, 'invalid_image');
        expect(response.body.error.message).toMatch(message);
      }
    }
  });
});

/** A 2×1 24-bit BMP (the committed fixture: sharp writes none). */
const bmp = () => readFileSync(new URL('../fixtures/vision/bmp-2x1.bmp', import.meta.url));

describe('image refusals', () => {
  it('name the request field, the format and the reason on every image endpoint', async () => {
    // Prepare: a BMP, the committed HEIC, and an AVIF over the AVIF limit (one colour: a few hundred bytes)
    const { default: sharp } = await import('sharp');
    const heic = await readFile(new URL('../fixtures/vision/heic-16x12.heic', import.meta.url));
    const avif = await sharp({ create: { width: 4097, height: 4096, channels: 3, background: '#888' } })
      .avif({ effort: 0 })
      .toBuffer();
    const cases = [
      [
        bmp(),
        'unsupported_format',
        'bmp',
        /^Invalid imageData: BMP is not a supported image format \(supported: JPEG, PNG, WebP, GIF, AVIF, TIFF\)\.$/,
      ],
      [heic, 'unsupported_format', 'heic', /^Invalid imageData: HEIC\/HEIF is not a supported image format/],
      [
        avif,
        'too_many_pixels',
        'avif',
        /^Invalid imageData: an AVIF of 4097x4096 pixels exceeds the AVIF limit of 16\.8 megapixels/,
      ],
    ] as const;
    for (const [image, reason, format, message] of cases) {
      for (const [path, body] of [
        ['/api/v1/search/image', {}],
        ['/api/v1/detect', {}],
        ['/api/v1/related', {}],
        ['/', { feedId: stack.demo.searchId }],
      ] as const) {
        // Act
        const response = await stack.call('POST', path, {
          body: { imageData: image.toString('base64'), ...body },
          headers: path === '/' ? {} : auth(),
        });
        // Assess
        expectError(response, 422, 'invalid_image');
        expect(response.body.error.message, path).toMatch(message);
        expect(response.body.error.details).toEqual([
          { path: 'imageData', message: expect.any(String), reason, format },
        ]);
      }
    }
  });

  it('related products search the fallback when imageData is refused, and name both when both are', async () => {
    // Prepare: the demo catalogue's multimeter photo as the fallback
    await stack.importsIdle();
    const photo = await readFile(new URL('../../demo/images/tools-multimeter2.webp', import.meta.url));
    const fallback = photo.toString('base64');
    const related = (body: Record<string, unknown>) =>
      stack.call('POST', '/api/v1/related', {
        body: { limit: 3, ...body },
        headers: auth(),
      });
    // Act
    const fallbackOnly = await related({ productId: 'nope', fallback });
    const badImage = await related({
      productId: 'nope',
      imageData: bmp().toString('base64'),
      fallback,
    });
    const noProduct = await related({
      imageData: bmp().toString('base64'),
      fallback,
    });
    const bothBad = await related({
      imageData: bmp().toString('base64'),
      fallback: Buffer.from('not an image').toString('base64'),
    });
    // Assess
    expect(fallbackOnly.status).toBe(200);
    expect(fallbackOnly.body[0]?.product_id).toBe('multimeter');
    expect([badImage.status, noProduct.status]).toEqual([200, 200]);
    expect(badImage.body).toEqual(fallbackOnly.body);
    expect(noProduct.body).toEqual(fallbackOnly.body);
    expectError(bothBad, 422, 'invalid_image');
    expect(bothBad.body.error.message).toMatch(
      /^Invalid imageData: BMP .*\. Invalid fallback: the data is not/,
    );
    expect(bothBad.body.error.details).toEqual([
      {
        path: 'imageData',
        message: expect.any(String),
        reason: 'unsupported_format',
        format: 'bmp',
      },
      { path: 'fallback', message: expect.any(String), reason: 'undecodable' },
    ]);
  });
});
