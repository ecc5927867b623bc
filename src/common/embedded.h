/* Files embedded into the library at build time (tools/embed). */
#ifndef FI_EMBEDDED_H
#define FI_EMBEDDED_H

typedef struct fi_embedded_file {
    const char *name; /* base name, as templates #include it */
    const char *text;
    long size;
} fi_embedded_file;

extern const fi_embedded_file fi__templates[];
extern const int fi__template_count;
extern const char fi__schema_sql[];

#endif
