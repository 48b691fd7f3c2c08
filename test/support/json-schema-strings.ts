/**
 * The problems a JSON Schema's string keywords (those zod writes: pattern, allOf of patterns, minLength,
 * maxLength) find with `value`, as a client validating against the published document sees them (no
 * validator package for draft 2020-12 installs offline). Empty when they accept it.
 */
export function stringKeywordProblems(schema: Record<string, unknown>, value: string): string[] {
  const problems: string[] = [];
  const patterns = [schema, ...((schema.allOf as Record<string, unknown>[] | undefined) ?? [])]
    .map((part) => part.pattern)
    .filter((pattern): pattern is string => typeof pattern === 'string');
  // (JSON Schema patterns are ECMA-262 regular expressions, unanchored, with Unicode semantics.)
  for (const pattern of patterns)
    if (!new RegExp(pattern, 'u').test(value)) problems.push(`does not match ${pattern}`);
  const length = [...value].length;
  if (typeof schema.minLength === 'number' && length < schema.minLength) problems.push('too short');
  if (typeof schema.maxLength === 'number' && length > schema.maxLength) problems.push('too long');
  return problems;
}
