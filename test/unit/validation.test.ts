import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ValidationError } from '#lib/domain/errors.ts';
import { ListImportsQuery, ProductsPageQuery, StartImportRequest } from '#lib/domain/catalogue/imports.ts';
import { RelatedRequest, RootSearchRequest, SearchImageRequest } from '#lib/domain/schemas.ts';
import { parseInput } from '#lib/domain/validation.ts';

const imageData =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/** The details of the ValidationError `input` gets, as [path, message] pairs. */
function problems(schema: z.ZodType, input: unknown): [string, string][] {
  try {
    parseInput(schema, input);
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return (error as ValidationError).details.map(({ path, message }) => [path, message]);
  }
  throw new Error('expected a validation error');
}

describe('validation messages', () => {
  it.each([
    ['a fraction where an integer goes', { imageData, limit: 1.5 }, 'expected an integer, got 1.5'],
    ['text where a number goes', { imageData, limit: 'ten' }, 'expected a number, got "ten"'],
    ['a number under the range', { imageData, limit: 0 }, 'must be at least 1'],
    ['a number over the range', { imageData, limit: 101 }, 'must be at most 100'],
  ])('says what was expected and what came, in plain words: %s', (_name, body, message) => {
    expect(problems(SearchImageRequest, body)).toEqual([['limit', message]]);
  });

  it('names strings, lists, choices and missing fields in plain words, and keeps a schema its own', () => {
    // Prepare
    const schema = z.object({
      name: z.string().min(1),
      code: z.string().max(3),
      tags: z.array(z.string()).max(2),
      plan: z.enum(['free', 'pro']),
      ratio: z.number().gt(0),
      id: z.string(),
      own: z.string().min(2, 'needs two letters'),
    });
    // Act
    const found = problems(schema, {
      name: '',
      code: 'abcd',
      tags: ['a', 'b', 'c'],
      plan: 'gold',
      ratio: 0,
      own: 'x',
    });
    // Assess
    expect(found).toEqual([
      ['name', 'must not be empty'],
      ['code', 'must be at most 3 characters long'],
      ['tags', 'must have at most 2 items'],
      ['plan', 'must be one of "free", "pro"'],
      ['ratio', 'must be greater than 0'],
      ['id', 'is required'],
      ['own', 'needs two letters'],
    ]);
  });

  it.each([
    [
      'an integer past the safe range names the schema bound',
      SearchImageRequest,
      { imageData, limit: 1e300 },
      [['limit', 'must be at most 100']],
    ],
    [
      'a root search limit that is neither number nor digits',
      RootSearchRequest,
      { imageData, limit: 1.5 },
      [['limit', 'expected a whole number between 1 and 100, as a number or a string']],
    ],
    [
      'a filter value of none of its types',
      RelatedRequest,
      { productId: 'p', filters: [{ key: 'color', value: null }] },
      [['filters.0.value', 'expected a string, a number or a boolean, got null']],
    ],
    [
      'a filter without its value',
      RelatedRequest,
      { productId: 'p', filters: [{ key: 'color' }] },
      [['filters.0.value', 'is required']],
    ],
  ])('keeps the field its plain problem: %s', (_name, schema, body, expected) => {
    expect(problems(schema, body)).toEqual(expected);
  });

  it('takes a page size in a query string as digits only', () => {
    for (const limit of ['abc', '', '0x2', '2e0', '1.0', ' 2'])
      expect(problems(ProductsPageQuery, { limit }), limit).toEqual([['limit', 'expected a whole number']]);
    expect(problems(ListImportsQuery, { limit: '0' })).toEqual([['limit', 'must be at least 1']]);
    expect(problems(ListImportsQuery, { limit: '101' })).toEqual([['limit', 'must be at most 100']]);
    expect(parseInput(ProductsPageQuery, { limit: '200' })).toEqual({ limit: 200 });
    expect(parseInput(ListImportsQuery, {})).toEqual({ limit: 20 });
  });

  it('reads a root search limit of "-1" as out of range, not as no whole number', () => {
    expect(problems(RootSearchRequest, { imageData, limit: '-1' })).toEqual([
      ['limit', 'must be between 1 and 100'],
    ]);
    expect(problems(RootSearchRequest, { imageData, offset: '-1' })).toEqual([
      ['offset', 'must be between 0 and 999'],
    ]);
  });

  it('refuses inline feed content that is not valid Unicode text, and takes an escape written in it', () => {
    expect(problems(StartImportRequest, { format: 'csv', content: 'id,title\na\ud800,x\n' })).toEqual([
      [
        'content',
        'is not valid Unicode text: it has a lone UTF-16 surrogate (a JSON escape such as "\\ud800")',
      ],
    ]);
    // The six characters of an escape in a JSON feed are text: that row's id is refused at import.
    expect(parseInput(StartImportRequest, { format: 'jsonl', content: '{"id":"\\ud800"}' }).content).toBe(
      '{"id":"\\ud800"}',
    );
  });

  it('says a feed URL must be http or https', () => {
    expect(problems(StartImportRequest, { url: 'ftp://example.com/feed.xml' })).toEqual([
      ['url', 'must be an http or https URL'],
    ]);
  });
});
