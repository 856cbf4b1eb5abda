// datasets' file-name tables (datasets 5.2: packaged_modules/__init__.py, data_files.py) and its
// choice of builder. See datasets_file_types.h; the tables are compared with datasets' own in
// tests/config/test_datasets_file_types.cpp.
#include "finetune/data/datasets_file_types.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "finetune/util/text.h"

namespace finetune {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The ".suffix" parts of a file name after its first dot: "a.jsonl.gz" -> .jsonl, .gz.
std::vector<std::string> dotted_suffixes(const std::string& file_name) {
  std::vector<std::string> out;
  for (size_t dot = file_name.find('.'); dot != std::string::npos;) {
    const size_t next = file_name.find('.', dot + 1);
    out.push_back(file_name.substr(dot, next == std::string::npos ? std::string::npos : next - dot));
    dot = next;
  }
  return out;
}

// Extension (as written in the table) -> module.
const std::map<std::string, std::string>& module_by_extension() {
  static const std::map<std::string, std::string> table = [] {
    std::map<std::string, std::string> out;
    for (const auto& [module, extensions] : datasets_extension_modules())
      for (const auto& extension : words(extensions)) out.emplace(extension, module);
    return out;
  }();
  return table;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& datasets_extension_modules() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"csv", ".csv .tsv"},
      {"json", ".json .jsonl .ndjson"},
      {"parquet", ".parquet .geoparquet .gpq"},
      {"arrow", ".arrow"},
      {"text", ".txt"},
      {"conll", ".conll .conllu"},
      {"webdataset", ".tar"},
      {"xml", ".xml"},
      {"hdf5", ".hdf5 .h5"},
      {"eval", ".eval"},
      {"harbor", ".toml .md"},
      {"lance", ".lance"},
      {"tsfile", ".tsfile"},
      {"vortex", ".vortex"},
      {"fasta", ".fa .fasta .fna .ffn .faa .frn .afa"},
      {"genbank", ".gb .gbk .genbank"},
      {"fastq", ".fq .fastq"},
      {"pdb", ".pdb .ent .PDB .ENT"},
      {"mmcif", ".cif .mmcif"},
      {"imagefolder",
       ".blp .bmp .dib .bufr .cur .pcx .dcx .dds .ps .eps .fit .fits .fli .flc .ftc .ftu .gbr .gif .grib "
       ".png .apng .jp2 .j2k .jpc .jpf .jpx .j2c .icns .ico .im .iim .tif .tiff .jfif .jpe .jpg .jpeg "
       ".msp .pcd .pxr .pbm .pgm .ppm .pnm .psd .bw .rgb .rgba .sgi .ras .tga .icb .vda .vst .webp .wmf "
       ".emf .xbm .xpm .BLP .BMP .DIB .BUFR .CUR .PCX .DCX .DDS .PS .EPS .FIT .FITS .FLI .FLC .FTC .FTU "
       ".GBR .GIF .GRIB .PNG .APNG .JP2 .J2K .JPC .JPF .JPX .J2C .ICNS .ICO .IM .IIM .TIF .TIFF .JFIF "
       ".JPE .JPG .JPEG .MSP .PCD .PXR .PBM .PGM .PPM .PNM .PSD .BW .RGB .RGBA .SGI .RAS .TGA .ICB .VDA "
       ".VST .WEBP .WMF .EMF .XBM .XPM"},
      {"audiofolder",
       ".mpg .MPG .aiff .au .avr .caf .flac .htk .svx .mat4 .mat5 .mpc2k .ogg .paf .pvf .raw .rf64 .sd2 "
       ".sds .ircam .voc .w64 .wav .nist .wavex .wve .xi .mp3 .opus .3gp .3g2 .asf .flv .m4v .webm .f4v "
       ".wmv .wma .ogm .mxf .nut .AIFF .AU .AVR .CAF .FLAC .HTK .SVX .MAT4 .MAT5 .MPC2K .OGG .PAF .PVF "
       ".RAW .RF64 .SD2 .SDS .IRCAM .VOC .W64 .WAV .NIST .WAVEX .WVE .XI .MP3 .OPUS .3GP .3G2 .ASF .FLV "
       ".M4V .WEBM .F4V .WMV .WMA .OGM .MXF .NUT"},
      {"videofolder", ".mpeg .MPEG .avi .mp4 .mov .mkv .AVI .MP4 .MOV .MKV"},
      {"meshfolder", ".glb .gltf .ply .stl .GLB .GLTF .PLY .STL"},
      {"pdffolder", ".pdf .PDF"},
      {"niftifolder", ".nii .NII"},
  };
  return table;
}

const std::vector<std::string>& datasets_ignored_file_names() {
  static const std::vector<std::string> names = {"README.md",          "config.json",        "dataset_dict.json",
                                                 "dataset_info.json",  "dataset_infos.json", "dummy_data.zip"};
  return names;
}

const std::vector<std::string>& datasets_metadata_file_names() {
  static const std::vector<std::string> names = {"instruction.md",   "latest_version_hint.json", "metadata.csv",
                                                 "metadata.jsonl",   "metadata.parquet",         "task.toml"};
  return names;
}

const std::vector<std::pair<std::string, std::string>>& datasets_metadata_extensions() {
  static const std::vector<std::pair<std::string, std::string>> table = {{"lance", ".idx .txn .manifest"}};
  return table;
}

bool has_datasets_data_extension(const std::string& file_name) {
  for (const auto& suffix : dotted_suffixes(base_name(file_name))) {
    if (module_by_extension().count(suffix) || suffix == ".zip") return true;
    for (const auto& [module, extensions] : datasets_metadata_extensions())
      if (contains(words(extensions), suffix)) return true;
  }
  return false;
}

std::string datasets_builder_for(const std::vector<std::string>& files) {
  // (extension, is metadata) -> count, as Counter does.
  std::map<std::pair<std::string, bool>, int64_t> counts;
  for (const auto& file : files) {
    const std::string name = base_name(file);
    const bool metadata = contains(datasets_metadata_file_names(), name);
    for (const auto& suffix : dotted_suffixes(name)) ++counts[{lowercase(suffix), metadata}];
  }
  // datasets sorts by this key, largest first.
  const auto key = [](const std::pair<const std::pair<std::string, bool>, int64_t>& entry) {
    const std::string& ext = entry.first.first;
    return std::make_tuple(!entry.first.second, entry.second, ext == ".parquet", ext == ".lance", ext == ".vortex",
                           ext == ".arrow", ext == ".jsonl", ext == ".json", ext == ".csv", ext);
  };
  std::vector<std::pair<const std::pair<std::string, bool>, int64_t>*> order;
  for (auto& entry : counts) order.push_back(&entry);
  std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) { return key(*a) > key(*b); });
  for (const auto* entry : order) {
    const std::string& ext = entry->first.first;
    const auto it = module_by_extension().find(ext);
    if (it != module_by_extension().end()) return it->second;
    if (ext == ".zip") return "zip";
  }
  return "";
}

bool datasets_builder_keeps(const std::string& module, const std::string& path) {
  std::vector<std::string> extensions = {".zip"};
  for (const auto& [name, list] : datasets_extension_modules())
    if (name == module) for (const auto& ext : words(list)) extensions.push_back(ext);
  for (const auto& [name, list] : datasets_metadata_extensions())
    if (name == module) for (const auto& ext : words(list)) extensions.push_back(ext);
  // The regex .*(ext|...)(\..+)?$ : an extension at the end, or followed by "." and more.
  for (const auto& ext : extensions) {
    for (size_t at = path.find(ext); at != std::string::npos; at = path.find(ext, at + 1)) {
      const size_t rest = at + ext.size();
      if (rest == path.size() || (path[rest] == '.' && rest + 1 < path.size())) return true;
    }
  }
  return false;
}

}  // namespace finetune
