/*
 * The settings half of fijit_cache.h: fi_settings_load and
 * fi_setting_origin_name, the public face of the operator's settings that
 * core/settings.c reads (defaults, fijit.conf, FIJIT_*), for the CLI's
 * `fijit config`.
 */
#include "common/error.h"
#include "core/settings.h"
#include "fijit_cache.h"

int fi_settings_load(fi_settings *out, const char *cache_dir)
{
    if (!out) return fi__error(FI_EINVALID, "no settings struct to fill");
    if (out->version != FI_SETTINGS_VERSION)
        return fi__error(FI_EINVALID, "settings.version is %u, this library expects %d "
                         "(initialise with FI_SETTINGS_INIT)", out->version, FI_SETTINGS_VERSION);
    return fi__settings_load(out, cache_dir, 1);
}

const char *fi_setting_origin_name(fi_setting_origin origin)
{
    switch (origin) {
    case FI_SETTING_FILE: return FI_CONFIG_FILE_NAME;
    case FI_SETTING_ENV: return "environment";
    case FI_SETTING_PROGRAM: return "program";
    default: return "default";
    }
}
