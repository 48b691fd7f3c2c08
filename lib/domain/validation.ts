import { z } from 'zod';
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

const NO_QUERY = z.strictObject({});

/**
 * For routes that take no query parameters: one there is a typo or an option the route does not have
 * (`?limit=1` on the feeds list returned every feed), refused like the unknown parameters of the routes
 * that take some.
 */
export function refuseQuery(query: Record<string, string | undefined> | null | undefined): void {
  parseInput(NO_QUERY, query ?? {}, '(query)');
}
