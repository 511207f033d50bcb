# Every header of a layered part of cache-agent/ opens with its layer guard
# (#if !__has_include("spoke_layer/<part>.h") #error ..., see cache-agent/CMakeLists.txt), so
# that including it from a lower layer fails to compile.
# Run: cmake -DSOURCE_DIR=<repo> -P layering_check.cmake
set(parts cache remote prefetch fs volume peer fuse agent exe)
set(failures "")
foreach(part ${parts})
  file(GLOB headers "${SOURCE_DIR}/cache-agent/${part}/*.h")
  foreach(h ${headers})
    file(READ ${h} text)
    string(FIND "${text}" "#if !__has_include(\"spoke_layer/${part}.h\")" at)
    if(at EQUAL -1)
      list(APPEND failures "${h}: missing its layer guard for spoke_layer/${part}.h")
    endif()
  endforeach()
endforeach()
if(failures)
  list(JOIN failures "\n" msg)
  message(FATAL_ERROR "layer guards missing:\n${msg}")
endif()
message(STATUS "every layered header carries its layer guard")
