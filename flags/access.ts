/**
 * Reading and writing an environment's desired flag values at its provider: the file of the file provider
 * or the Unleash admin API. One shape for both, so `workbench flags set` and a promotion change flags the
 * same way whichever provider an environment uses.
 */
import { flagsFile, readFlagsFile, readShadowFlags, writeFlagsFile } from './file-store.js';
import type { FlagKey, FlagValues } from './registry.js';
import { readUnleashFlags, setUnleashFlag, type UnleashAdminOptions } from './unleash-admin.js';

export interface FlagsAccess {
  kind: 'file' | 'unleash';
  read(): Promise<FlagValues>;
  write(flag: FlagKey, on: boolean): Promise<void>;
  /** Where the values live, for messages. */
  describe: string;
}

export function fileFlagsAccess(dir: string, environment: string): FlagsAccess {
  const path = flagsFile(dir, environment);
  return {
    kind: 'file',
    describe: path,
    read: async () => readFlagsFile(path),
    // The other flags' shadow stays as the file has it; the flag written is on or off now.
    write: async (flag, on) =>
      writeFlagsFile(
        path,
        { ...readFlagsFile(path), [flag]: on },
        readShadowFlags(path).filter((key) => key !== flag),
      ),
  };
}

export function unleashFlagsAccess(admin: UnleashAdminOptions): FlagsAccess {
  return {
    kind: 'unleash',
    describe: `${admin.url} (Unleash environment ${admin.environment})`,
    read: () => readUnleashFlags(admin),
    write: (flag, on) => setUnleashFlag(admin, flag, on),
  };
}
