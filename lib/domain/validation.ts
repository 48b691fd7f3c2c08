import type { z } from 'zod';
import { ValidationError } from '#lib/domain/errors.ts';

/**
 * Parses input with a zod schema; failures become one ValidationError listing every field. `source`
 * names the whole input in an error about it (an unknown key, a wrong type): the body or the query.
 */
export function parseInput<S extends z.ZodType>(
  schema: S,
  input: unknown,
  source: '(body)' | '(query)' = '(body)',
): z.infer<S> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  const details = parsed.error.issues.map((issue) => ({
    path: issue.path.map(String).join('.') || source,
    message: issue.message,
  }));
  const first = details[0];
  throw new ValidationError(first ? `Invalid ${first.path}: ${first.message}` : 'Invalid request.', details);
}
