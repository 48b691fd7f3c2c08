import { describe, expect, it } from 'vitest';
import { DetectRequest, RelatedRequest, RootSearchRequest, SearchImageRequest } from '#lib/domain/schemas.ts';

const imageData =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

describe('limit and offset of the search requests', () => {
  it.each([
    ['image search, offset past the window', SearchImageRequest, { imageData, offset: 1000 }],
    ['root search, offset past the window', RootSearchRequest, { imageData, offset: '1000' }],
    ['image search, offset + limit past it', SearchImageRequest, { imageData, offset: 995, limit: 10 }],
  ])('names one problem once: %s (the range and the window both did)', (_name, schema, body) => {
    const parsed = schema.safeParse(body);
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((issue) => issue.path.join('.'))).toEqual(['offset']);
  });

  it('defaults limit to 10 and offset to 0 on every endpoint that takes them, as the interface says', () => {
    // Act
    const parsed = [
      SearchImageRequest.parse({ imageData }),
      RelatedRequest.parse({ productId: 'p1' }),
      RootSearchRequest.parse({ imageData }),
    ];
    // Assess
    for (const request of parsed) expect([request.limit, request.offset]).toEqual([10, 0]);
    expect(DetectRequest.parse({ imageData }).limit).toBe(10);
  });

  it('takes the last offset of the window, as a number or a string', () => {
    expect(SearchImageRequest.safeParse({ imageData, offset: 999, limit: 1 }).success).toBe(true);
    expect(RootSearchRequest.safeParse({ imageData, offset: '999', limit: '1' }).success).toBe(true);
  });
});

describe('imageData of the search requests', () => {
  it('names an empty image once, as empty, not also as not base64, and the other problems too', () => {
    const parsed = SearchImageRequest.safeParse({ imageData: '', limit: 100, offset: 950 });
    expect(parsed.error?.issues.map((issue) => [issue.path.join('.'), issue.message])).toEqual([
      ['imageData', 'is empty'],
      ['offset', 'offset + limit must not exceed 1000'],
    ]);
  });
});
