/**
 * Whether a process with this pid exists (signal 0 checks without sending anything). EPERM means it
 * exists but belongs to another user: alive too. Used by the lock files of local mode's data folder and
 * of the training-data fetch.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
