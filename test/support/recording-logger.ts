import type { Logger } from '#lib/log.ts';

/** A logger that keeps each line's level and message in `lines`, for tests that check what was logged. */
export function recordingLogger(lines: { level: string; message: string }[]): Logger {
  const at =
    (level: string) =>
    (message: string): void => {
      lines.push({ level, message });
    };
  const logger: Logger = {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: () => logger,
  };
  return logger;
}
